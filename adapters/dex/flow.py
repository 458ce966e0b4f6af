"""The Dex wiring: one Flow per tool call, its Steps, the decisions channel and the decide RPC.

```
StartToolCall -> AwaitToolApproval (when the verdict requires approval) -> CallTool
                      ^   waits on DECISIONS[<call id>] or a timer        |  attempts exhausted
                      |__ woken early: wait again                         v
                                                                     SettleToolCall
```

- Every Step that decides whether to ask judges the call (`judge_call`: the active policy
  set's verdict, or the tool's own rule): `StartToolCall` routes by it, `AwaitToolApproval`
  judges again on each wake-up, `CallTool` judges once more and runs the call under that
  verdict (a denial is recorded with its reason, nothing runs). A call the ledger answers is
  only replayed, so a Step Dex runs again reaches the same outcome; a call whose verdict now
  requires an approval not yet decided goes back to `AwaitToolApproval`.

- `AwaitToolApproval.wait_for` records the request in the store and waits on the decisions
  channel instance of the call (`channel_key(call_id)`), or on a timer for the policy's expiry
  (or the periodic re-check, whichever is sooner); `execute` reads the store (never the
  message) and goes on once the decision is final or the request expired.
- `decide` (RPC `signoff_decide`) records the decision in the store first, then publishes the
  wake-up; a repeated delivery records nothing and publishes nothing new.
- `CallTool` runs the call through the ledger with a Dex retry policy chosen by the effect:
  read and idempotent_write three attempts, anything else one. When its attempts run out,
  `SettleToolCall` asks the ledger once more: it replays a finished call, records
  `outcome_unknown` for a write whose worker died (after its lease lapses) and never runs a
  call beyond its effect's attempts.

Every handler is async: build the Registry with `allow_async_handlers=True` and serve it with
an `AsyncWorker`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from dataclasses import replace
from datetime import timedelta
from typing import Protocol, TypeVar

from dex import (
    AsyncContext,
    ChannelMap,
    ChannelMessagesNotLoadedError,
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
    Timer,
    Wait,
    go_to,
    go_to_many,
    graceful_complete,
    rpc,
)

from approvals import ApprovalPending
from approvals.policies import Outcome
from ledger.calls.model import Effect
from ledger.log import get_logger

from .errors import ApprovalNotForThisCall
from .logic import (
    ApprovalWait,
    DexTool,
    SignoffDex,
    answered,
    await_approval,
    call_tool,
    decide_for_flow,
    governed_spec,
    judge_call,
    require_runtime,
)
from .values import (
    ApprovalSignal,
    DecideRequest,
    DecideResult,
    ToolCallRequest,
    ToolCallResult,
    channel_key,
)

__all__ = [
    "DECIDE_RPC",
    "DECISIONS",
    "DEFAULT_RECHECK",
    "HEARTBEAT_SECONDS",
    "AwaitToolApproval",
    "CallTool",
    "SettleToolCall",
    "StartToolCall",
    "ToolCallFlow",
    "ToolCallHost",
    "call_step_options",
    "check_recheck",
    "decide_and_wake",
    "heartbeating",
    "retry_policy",
    "wake_decided",
]

DECISIONS: ChannelMap[ApprovalSignal] = ChannelMap("signoff_decisions", ApprovalSignal)
"""Wake-ups for waiting approvals, one instance per tool call (`channel_key(call_id)`)."""
DECIDE_RPC = "signoff_decide"
DEFAULT_RECHECK = timedelta(minutes=5)
"""How often a waiting approval re-reads the store even without a wake-up."""
HEARTBEAT_SECONDS = 10.0
"""A running tool call heartbeats this often (Dex's default heartbeat timeout is a minute)."""

T = TypeVar("T")
log = get_logger(__name__)


def retry_policy(effect: Effect) -> RetryPolicy:
    """Dex attempts of a call step: three for read and idempotent_write, else one."""
    return RetryPolicy(maximum_attempts=effect.max_attempts)


def call_step_options(effect: Effect) -> StepOptions:
    """Options of the movement to `CallTool` for a tool of this effect."""
    # SYNC: the Step's result is persisted before the Worker's call is acknowledged, and there
    # is no local-activity phase (asynchronous durability starts with one, with limits of its
    # own), so the attempts are exactly the retry policy's.
    return StepOptions(
        execute_retry=retry_policy(effect),
        execute_durability=StepDurability.SYNC,
    ).on_execute_failure_proceed_to(SettleToolCall)


async def heartbeating(context: AsyncContext, work: Awaitable[T]) -> T:
    """Await `work`, heartbeating every HEARTBEAT_SECONDS so Dex knows the Worker is alive."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=HEARTBEAT_SECONDS)
            if done:
                return task.result()
            await context.heartbeat()
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def check_recheck(recheck_every: timedelta | None) -> None:
    """Raises:
    ValueError: `recheck_every` is not None nor whole seconds, at least one (Dex timers)."""
    if recheck_every is not None and (
        recheck_every.total_seconds() < 1 or not recheck_every.total_seconds().is_integer()
    ):
        raise ValueError("recheck_every must be whole seconds, at least one (Dex timers)")


class ToolCallHost(Protocol):
    """What the tool-call Steps need of the Flow they run in: `ToolCallFlow`, or a Flow that
    runs many calls (the agent session) with the same four Steps."""

    recheck_every: timedelta | None

    def signoff(self) -> SignoffDex: ...

    async def request_for(
        self, context: AsyncContext, input: ToolCallRequest
    ) -> ToolCallRequest: ...

    def approval_waiting(
        self, context: AsyncContext, request: ToolCallRequest, state: ApprovalWait
    ) -> None: ...

    def after_tool_call(
        self, context: AsyncContext, request: ToolCallRequest, result: ToolCallResult
    ) -> StepDecision: ...


class _ToolCallStep(Step[ToolCallRequest]):
    def __init__(self, flow: ToolCallHost) -> None:
        self.flow = flow

    def _tool(self, request: ToolCallRequest) -> DexTool:
        return self.flow.signoff().tool(request.tool)

    def _call(self, request: ToolCallRequest, tool: DexTool) -> StepDecision:
        options = call_step_options(tool.effect)
        return go_to_many(StepMovement.of(CallTool, request, options=options))


class StartToolCall(_ToolCallStep):
    """Route the call by its verdict: to the approval when it requires one, else straight to
    the call (which runs it, or records the policy's denial)."""

    async def execute(  # type: ignore[override]
        self, context: AsyncContext, input: ToolCallRequest
    ) -> StepDecision:
        runtime, tool = self.flow.signoff(), self._tool(input)
        request = await self.flow.request_for(context, input)
        verdict = await judge_call(runtime.policy, context.flow_id, request, tool)
        if verdict.outcome is Outcome.APPROVAL:
            return go_to(AwaitToolApproval, input)
        return self._call(input, tool)


class AwaitToolApproval(_ToolCallStep):
    """Record the approval request; wait for the decision's wake-up or the expiry timer.
    The call is judged again each time: a call the ledger answers already (a once-per-run
    tool's later call), or whose verdict no longer requires an approval, asks nobody."""

    async def _state(
        self, context: AsyncContext, input: ToolCallRequest, tool: DexTool
    ) -> tuple[ToolCallRequest, ApprovalWait] | None:
        """The call and where its approval stands (asked for now if need be); None: the call
        needs no approval now."""
        runtime = self.flow.signoff()
        if await answered(runtime.ledger, context.flow_id, input, tool.spec):
            return None
        request = await self.flow.request_for(context, input)
        verdict = await judge_call(runtime.policy, context.flow_id, request, tool)
        if verdict.outcome is not Outcome.APPROVAL:
            return None
        spec = governed_spec(tool, verdict)
        state = await await_approval(runtime.store, context.flow_id, request, spec, verdict=verdict)
        return request, state

    async def wait_for(  # type: ignore[override]
        self, context: AsyncContext, input: ToolCallRequest
    ) -> Wait:
        tool = self._tool(input)
        asked = await self._state(context, input, tool)
        if asked is None:
            return Wait.skip_immediately()
        request, state = asked
        if state.ready:
            return Wait.skip_immediately()
        self.flow.approval_waiting(context, request, state)
        signal = DECISIONS.for_one(state.channel_key)
        timers = [t for t in (state.timer, self.flow.recheck_every) if t is not None]
        if not timers:
            return Wait.until(signal)
        return Wait.any_of(signal, Timer.by_duration(min(timers)))

    async def execute(  # type: ignore[override]
        self, context: AsyncContext, input: ToolCallRequest
    ) -> StepDecision:
        tool = self._tool(input)
        asked = await self._state(context, input, tool)
        if asked is not None and not asked[1].ready:
            return go_to(AwaitToolApproval, input)  # a re-check, or an early timer: wait again
        return self._call(input, tool)


class CallTool(_ToolCallStep):
    """Run the call through the tool-call ledger under its verdict; then
    `ToolCallFlow.after_tool_call`. A verdict that now requires an approval nobody has
    decided yet (a set published since the call was routed) sends it to wait for it."""

    async def execute(  # type: ignore[override]
        self, context: AsyncContext, input: ToolCallRequest
    ) -> StepDecision:
        runtime, tool = self.flow.signoff(), self._tool(input)
        request = await self.flow.request_for(context, input)
        work = call_tool(
            runtime.ledger, runtime.store, context.flow_id, request, tool, policy=runtime.policy
        )
        try:
            result = await heartbeating(context, work)
        except ApprovalPending:
            return go_to(AwaitToolApproval, input)
        return self.flow.after_tool_call(context, input, result)


class SettleToolCall(CallTool):
    """Reached when `CallTool` ran out of attempts: the ledger settles the call (replay,
    `outcome_unknown`, `failed`) and runs the tool only if its effect still allows it."""

    def get_step_options(self) -> StepOptions | None:
        return StepOptions(
            execute_retry=RetryPolicy(maximum_attempts=3),
            execute_durability=StepDurability.SYNC,
        )


class ToolCallFlow(Flow[ToolCallRequest]):
    """One tool call as a Dex Flow: its Flow ID is the Signoff run, its start input a
    `ToolCallRequest`, its output a `ToolCallResult`.

    Build it the same way in Workers and Clients. Workers pass a `SignoffDex` (store, ledger,
    tools); a Client-only Flow needs none (it only starts Flows and invokes the RPC).

    A waiting approval also re-reads the store every `recheck_every` (None: never), so a
    decision recorded without the RPC (the `signoff` CLI, a lost RPC) is seen within that
    time instead of only at the expiry.

    To continue into Steps of your own, subclass it: override `after_tool_call` to move on
    instead of completing, and `get_steps` / `get_persistence_schema` to add yours (keep the
    four Steps and `DECISIONS`).
    """

    def __init__(
        self,
        runtime: SignoffDex | None = None,
        *,
        flow_type: str = "SignoffToolCall",
        recheck_every: timedelta | None = DEFAULT_RECHECK,
    ) -> None:
        check_recheck(recheck_every)
        self._runtime = runtime
        self._flow_type = flow_type
        self.recheck_every = recheck_every
        self.start_step = StartToolCall(self)
        self.await_step = AwaitToolApproval(self)
        self.call_step = CallTool(self)
        self.settle_step = SettleToolCall(self)

    def get_flow_type(self) -> str:
        return self._flow_type

    def get_steps(self) -> StepList[ToolCallRequest]:
        return StepList.start_step(self.start_step).other_steps(
            self.await_step, self.call_step, self.settle_step
        )

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(DECISIONS)

    def signoff(self) -> SignoffDex:
        """The runtime of this Worker's Flow.

        Raises:
            RuntimeNotBound: a Client-only Flow.
        """
        return require_runtime(self._runtime, self._flow_type)

    async def request_for(self, context: AsyncContext, input: ToolCallRequest) -> ToolCallRequest:
        """The call a Step input stands for; here the input itself (it carries the call)."""
        return input

    def approval_waiting(
        self, context: AsyncContext, request: ToolCallRequest, state: ApprovalWait
    ) -> None:
        """Called each time `AwaitToolApproval` starts waiting; by default nothing."""

    def after_tool_call(
        self, context: AsyncContext, request: ToolCallRequest, result: ToolCallResult
    ) -> StepDecision:
        """What follows the call; by default the Flow completes with the result."""
        return graceful_complete(result)

    @rpc(name=DECIDE_RPC, timeout=timedelta(seconds=30))
    async def decide(self, context: Context, request: DecideRequest) -> RPCResult[DecideResult]:
        """Record a reviewer's decision in the store, then wake the waiting Step.

        A repeated delivery (same decision) writes nothing and publishes no second wake-up
        while one is pending; a different decision raises `DecisionConflict`.
        """
        return await decide_and_wake(self.signoff(), context, request)


async def decide_and_wake(
    runtime: SignoffDex, context: Context, request: DecideRequest
) -> RPCResult[DecideResult]:
    """The decide RPC of `ToolCallFlow`: record the decision in the store, then publish the
    wake-up on `DECISIONS[channel_key(call_id)]` (once)."""
    result = await decide_for_flow(runtime.store, context.flow_id, request)
    return await _wake(runtime, context, request, result)


async def wake_decided(
    runtime: SignoffDex, context: Context, request: DecideRequest
) -> RPCResult[DecideResult]:
    """The decide RPC of a Flow whose Workers must not decide (an agent session's, served by
    its agent Workers): it records nothing and trusts nothing of the request but the approval
    and call ids. Once the store holds a final decision (recorded by the reviewer side), it
    publishes the wake-up (once); before that it publishes nothing.

    Raises:
        ApprovalNotForThisCall: the approval is not this Flow's call's.
    """
    approval = await runtime.store.get(request.approval_id)
    if approval.run_id != context.flow_id or approval.call_id != request.call_id:
        raise ApprovalNotForThisCall(request.approval_id, context.flow_id, request.call_id)
    final = approval.status.final
    result = DecideResult(request.approval_id, approval.status, duplicate=final)
    return await _wake(runtime, context, request, result)


async def _wake(
    runtime: SignoffDex, context: Context, request: DecideRequest, result: DecideResult
) -> RPCResult[DecideResult]:
    bound = log.bind(
        run_id=context.flow_id, call_id=request.call_id, approval_id=request.approval_id
    )
    if not result.status.final:
        return RPCResult(result)  # undecided, or a quorum still open: nothing to wake yet
    key = channel_key(request.call_id)
    if _signal_pending(context, key, request.approval_id):
        bound.info("wake-up already pending; not published again")
        return RPCResult(result)
    approval = await runtime.store.get(request.approval_id)
    if approval.consumed:  # the call ran (or was denied) already
        return RPCResult(result)
    DECISIONS.publish(context, key, ApprovalSignal(request.approval_id, result.status))
    bound.info("decision published", status=str(result.status), duplicate=result.duplicate)
    return RPCResult(replace(result, signalled=True))


def _signal_pending(context: Context, key: str, approval_id: str) -> bool:
    """Whether a wake-up for this approval waits in the channel (only known when the caller
    loaded the instance's messages, as `decide_approval` does)."""
    try:
        pending = DECISIONS.pending_messages(context, key)
    except ChannelMessagesNotLoadedError:
        return False
    return any(m.value.approval_id == approval_id for m in pending)
