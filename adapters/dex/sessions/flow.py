"""The agent session Flow: one Flow per session, its Flow ID the session id (the LangGraph
thread and the Signoff run).

```
StartAgentSession -> RunModel -+-> [AwaitToolApproval ->] CallTool [-> SettleToolCall]
                       ^       |     (one branch per call, in parallel)
                       |       +-> ResumeTurn (until the ledger has every call's outcome)
                       |___________________|
RunModel, no tool calls (the answer) -> AwaitUserMessage -> RunModel (the next turn) ...
RunModel out of attempts -> FailTurn (a note for the model) -> AwaitUserMessage
```

The tool Steps are the one-call Flow's (`adapters.dex.flow`); this Flow hosts them
(`ToolCallHost`): a call's arguments are read from the encrypted checkpoint its
`ToolCallRequest` names, an approval that starts waiting raises an `interrupt_raised` event,
and a finished call wakes `ResumeTurn` (`TURN_CALLS[<checkpoint id>]`) instead of completing
the Flow. `ResumeTurn` reads the outcomes' presence from the ledger, never from the messages,
and also re-checks every `recheck_every`.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from dex import (
    AsyncContext,
    Channel,
    ChannelMap,
    Context,
    Flow,
    PersistenceSchema,
    RetryPolicy,
    RPCResult,
    Step,
    StepDecision,
    StepDurability,
    StepList,
    StepMovement,
    StepOptions,
    Stream,
    Timer,
    Wait,
    dead_end,
    go_to,
    go_to_many,
    graceful_complete,
    rpc,
)

from approvals.policies import Outcome
from ledger.log import get_logger

from ..errors import RuntimeNotBound
from ..flow import (
    DECIDE_RPC,
    DECISIONS,
    DEFAULT_RECHECK,
    AwaitToolApproval,
    CallTool,
    SettleToolCall,
    call_step_options,
    check_recheck,
    heartbeating,
    wake_decided,
)
from ..logic import ApprovalWait, SignoffDex, answered, judge_call, require_runtime
from ..values import DecideRequest, DecideResult, ToolCallRequest, ToolCallResult, channel_key
from .agent import AgentSession, ModelStop
from .notes import failed_turn_messages
from .values import (
    SessionEvent,
    SessionEventType,
    SessionResult,
    SessionStart,
    ToolCallDone,
    TurnStep,
    UserMessage,
)

__all__ = [
    "EVENTS",
    "SEND_MESSAGE_RPC",
    "TURN_CALLS",
    "USER_MESSAGES",
    "AgentSessionFlow",
    "AwaitUserMessage",
    "FailTurn",
    "ResumeTurn",
    "RunModel",
    "StartAgentSession",
]

EVENTS: Stream[SessionEvent] = Stream("signoff_session_events", SessionEvent, 4 << 20)
"""What clients read: text and reasoning deltas, interrupts raised, turns completed."""
TURN_CALLS: ChannelMap[ToolCallDone] = ChannelMap("signoff_turn_calls", ToolCallDone)
"""A finished call's wake-up for `ResumeTurn`, one instance per model message (its checkpoint)."""
USER_MESSAGES: Channel[UserMessage] = Channel("signoff_user_messages", UserMessage)
SEND_MESSAGE_RPC = "signoff_send_message"
MODEL_ATTEMPTS = 3

log = get_logger(__name__)


def _event(
    context: AsyncContext, kind: SessionEventType, turn: int, payload: dict[str, object]
) -> None:
    EVENTS.write(
        context,
        SessionEvent(kind, turn, context.step_execution_id, context.attempt, dict(payload)),
    )


class _SessionStep(Step[TurnStep]):
    def __init__(self, flow: AgentSessionFlow) -> None:
        self.flow = flow


class StartAgentSession(Step[SessionStart]):
    """The session's first turn: its user message goes to `RunModel`."""

    async def execute(  # type: ignore[override]
        self, context: AsyncContext, input: SessionStart
    ) -> StepDecision:
        return go_to(RunModel, TurnStep(1, input.requested_by, input.text))


class RunModel(_SessionStep):
    """One model call of the graph (`AgentSession.run_model`); then a Step per tool call and
    `ResumeTurn`, or, with no tool calls, the end of the turn. Three attempts, then
    `FailTurn`."""

    def get_step_options(self) -> StepOptions | None:
        return StepOptions(
            execute_retry=RetryPolicy(maximum_attempts=MODEL_ATTEMPTS),
            execute_durability=StepDurability.SYNC,
        ).on_execute_failure_proceed_to(FailTurn)

    async def execute(  # type: ignore[override]
        self, context: AsyncContext, input: TurnStep
    ) -> StepDecision:
        session = self.flow.session()

        def emit(kind: SessionEventType, payload: dict[str, object]) -> None:
            _event(context, kind, input.turn, payload)

        work = session.run_model(
            context.flow_id, input.turn, input.text, input.requested_by, emit, input.checkpoint_id
        )
        stop = await heartbeating(context, work)
        log.info("model call done", run_id=context.flow_id, turn=input.turn, calls=len(stop.calls))
        if not stop.calls:
            completed: dict[str, object] = {
                "status": "completed",
                "error": None,
                "checkpoint_id": stop.checkpoint_id,
            }
            emit(SessionEventType.TURN_COMPLETED, completed)
            done = TurnStep(input.turn, input.requested_by, checkpoint_id=stop.checkpoint_id)
            return go_to(AwaitUserMessage, done)
        return await self._run_calls(context, input, stop)

    async def _run_calls(
        self, context: AsyncContext, input: TurnStep, stop: ModelStop
    ) -> StepDecision:
        runtime = self.flow.signoff()
        movements: list[StepMovement[Any]] = []
        for call in stop.calls:
            request = ToolCallRequest(
                call.call_id,
                call.tool,
                {},  # read from the checkpoint by the Step: never held by Dex
                turn_id=str(input.turn),
                requested_by=input.requested_by,
                checkpoint_id=stop.checkpoint_id,
            )
            tool = runtime.tool(call.tool)
            # Routed by the call's verdict (its arguments read here, never kept); the Steps
            # judge it again.
            asked = await self.flow.request_for(context, request)
            verdict = await judge_call(runtime.policy, context.flow_id, asked, tool)
            if verdict.outcome is Outcome.APPROVAL:
                movements.append(StepMovement.of(AwaitToolApproval, request))
            else:
                options = call_step_options(tool.effect)
                movements.append(StepMovement.of(CallTool, request, options=options))
        resume = TurnStep(
            input.turn,
            input.requested_by,
            checkpoint_id=stop.checkpoint_id,
            calls={c.call_id: c.tool for c in stop.calls},
        )
        movements.append(StepMovement.of(ResumeTurn, resume))
        return go_to_many(*movements)


class ResumeTurn(_SessionStep):
    """Wait until the ledger holds an outcome for every call of the model message, then run
    the model again (it replays the outcomes)."""

    async def wait_for(  # type: ignore[override]
        self, context: AsyncContext, input: TurnStep
    ) -> Wait:
        if await self.flow.all_settled(context.flow_id, input.calls):
            return Wait.skip_immediately()
        key = channel_key(input.checkpoint_id or "none")
        woken = TURN_CALLS.for_range(key, at_least=1)
        if self.flow.recheck_every is None:
            return Wait.until(woken)
        return Wait.any_of(woken, Timer.by_duration(self.flow.recheck_every))

    async def execute(  # type: ignore[override]
        self, context: AsyncContext, input: TurnStep
    ) -> StepDecision:
        if not await self.flow.all_settled(context.flow_id, input.calls):
            return go_to(ResumeTurn, input)
        resume = TurnStep(input.turn, input.requested_by, checkpoint_id=input.checkpoint_id)
        return go_to(RunModel, resume)


class FailTurn(_SessionStep):
    """`RunModel` ran out of attempts: answer the calls nothing answered and leave a note in
    the conversation listing the calls that already ran (so the next turn's model does not
    repeat a write), end the turn as failed, and wait for the user's next message."""

    async def execute(  # type: ignore[override]
        self, context: AsyncContext, input: TurnStep
    ) -> StepDecision:
        failure = context.recovery_error
        error = failure.detail if failure is not None else "the model call failed"
        session = self.flow.session()
        at = input.checkpoint_id  # where the failed model call started
        added = await failed_turn_messages(
            session, context.flow_id, input.turn, error, at, input.text
        )
        if added:
            at = await session.add_messages(context.flow_id, input.requested_by, added, at)
        log.warning("turn failed", run_id=context.flow_id, turn=input.turn, added=len(added))
        failed: dict[str, object] = {"status": "failed", "error": error, "checkpoint_id": at}
        _event(context, SessionEventType.TURN_COMPLETED, input.turn, failed)
        after = TurnStep(input.turn, input.requested_by, checkpoint_id=at, error=error)
        return go_to(AwaitUserMessage, after)


class AwaitUserMessage(_SessionStep):
    """Between turns: the next user message starts a turn; `close` ends the session (the
    Flow's output is a `SessionResult`)."""

    async def wait_for(  # type: ignore[override]
        self, context: AsyncContext, input: TurnStep
    ) -> Wait:
        return Wait.until(USER_MESSAGES.for_one())

    async def execute(  # type: ignore[override]
        self, context: AsyncContext, input: TurnStep
    ) -> StepDecision:
        [message] = USER_MESSAGES.results(context)
        if message.close:
            status = "completed" if input.error is None else "failed"
            result = SessionResult(input.turn, status, input.error, input.checkpoint_id)
            return graceful_complete(result)
        next_turn = TurnStep(
            input.turn + 1, input.requested_by, message.text, checkpoint_id=input.checkpoint_id
        )
        return go_to(RunModel, next_turn)


class AgentSessionFlow(Flow[SessionStart]):
    """A LangGraph agent as a Dex agent session whose approvals and tool calls live in
    Signoff. Build it the same way in Workers (with an `AgentSession`) and Clients (without).

    Args:
        session: the graph, the encrypted checkpointer and the Signoff tools (Workers only).
        flow_type: the Dex Flow type.
        recheck_every: how often a waiting approval and a waiting `ResumeTurn` re-read the
            store and the ledger without a wake-up (None: never); whole seconds.
    """

    def __init__(
        self,
        session: AgentSession | None = None,
        *,
        flow_type: str = "SignoffAgentSession",
        recheck_every: timedelta | None = DEFAULT_RECHECK,
    ) -> None:
        check_recheck(recheck_every)
        self._session = session
        self._runtime = session.runtime() if session is not None else None
        self._flow_type = flow_type
        self.recheck_every = recheck_every
        self.start_step = StartAgentSession()
        self.steps: list[Step[Any]] = [
            RunModel(self),
            ResumeTurn(self),
            FailTurn(self),
            AwaitUserMessage(self),
            AwaitToolApproval(self),
            CallTool(self),
            SettleToolCall(self),
        ]

    def get_flow_type(self) -> str:
        return self._flow_type

    def get_steps(self) -> StepList[SessionStart]:
        return StepList.start_step(self.start_step).other_steps(*self.steps)

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(DECISIONS, TURN_CALLS, USER_MESSAGES, EVENTS)

    def session(self) -> AgentSession:
        """This Worker's session.

        Raises:
            RuntimeNotBound: a Client-only Flow.
        """
        if self._session is None:
            raise RuntimeNotBound(
                f"Flow {self._flow_type} was built without an AgentSession; Workers need "
                "AgentSessionFlow(AgentSession(graph, saver, signoff))"
            )
        return self._session

    # -- ToolCallHost: what the reused tool-call Steps ask of this Flow ----------------------

    def signoff(self) -> SignoffDex:
        return require_runtime(self._runtime, self._flow_type)

    async def request_for(self, context: AsyncContext, input: ToolCallRequest) -> ToolCallRequest:
        """The call with its arguments and what led to it, read from the encrypted checkpoint
        it names."""
        if input.checkpoint_id is None:
            return input
        session = self.session()
        args, led = await session.asked_call(context.flow_id, input.checkpoint_id, input.call_id)
        reason, said = (None, None) if led is None else (led.reason, led.last_user_message)
        return replace(input, args=args, reason=reason, last_user_message=said)

    def approval_waiting(
        self, context: AsyncContext, request: ToolCallRequest, state: ApprovalWait
    ) -> None:
        payload: dict[str, object] = {
            "approval_id": state.approval_id,
            "call_id": request.call_id,
            "tool": request.tool,
            "status": str(state.status),
        }
        _event(context, SessionEventType.INTERRUPT_RAISED, int(request.turn_id), payload)

    def after_tool_call(
        self, context: AsyncContext, request: ToolCallRequest, result: ToolCallResult
    ) -> StepDecision:
        key = channel_key(request.checkpoint_id or "none")
        TURN_CALLS.publish(context, key, ToolCallDone(request.call_id))
        return dead_end()

    async def all_settled(self, session_id: str, calls: dict[str, str]) -> bool:
        """Whether the ledger holds an outcome for each of these calls (id -> tool); a call
        of a once-per-run tool is answered by the run's call of that tool."""
        runtime = self.signoff()
        for call_id, tool in calls.items():
            request = ToolCallRequest(call_id, tool, {})
            if not await answered(runtime.ledger, session_id, request, runtime.tool(tool).spec):
                return False
        return True

    # -- RPCs --------------------------------------------------------------------------------

    @rpc(name=DECIDE_RPC, timeout=timedelta(seconds=30))
    async def decide(self, context: Context, request: DecideRequest) -> RPCResult[DecideResult]:
        """Wake the Step that waits for this approval once the store holds its decision.

        This RPC runs on the session's Workers, which hold only `signoff_app`: it records
        nothing, and the reviewer it names is not trusted. The reviewer side records the
        decision first (`SessionClient.resolve_interrupt`, the CLI, the HTTP service)."""
        return await wake_decided(self.signoff(), context, request)

    @rpc(name=SEND_MESSAGE_RPC, timeout=timedelta(seconds=30), load_channels=(USER_MESSAGES,))
    async def send_message(self, context: Context, message: UserMessage) -> RPCResult[bool]:
        """Queue the user's next message (or the end of the session) for `AwaitUserMessage`.
        Returns False, queuing nothing, when a message of that id still waits (a repeated
        delivery)."""
        pending = USER_MESSAGES.pending_messages(context)  # loaded for this RPC
        if any(m.value.message_id == message.message_id for m in pending):
            return RPCResult(False)
        USER_MESSAGES.publish(context, message)
        return RPCResult(True)
