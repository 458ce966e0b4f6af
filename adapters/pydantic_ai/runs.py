"""Pydantic AI runs through Signoff: `Signoff.run` starts one, `Signoff.resume` goes on from a
pause, in any process.

A run that ends with `DeferredToolRequests` (calls waiting for approvals Signoff asked for) is
paused server-side (`ledger.pauses.PausedRuns`: the message history and the requests, sealed);
the application gets the pause id, never the state. A resume claims the pause (once: a second
resume raises `PauseTaken`), builds `DeferredToolResults` from the store alone (approve ->
True, edit -> `ToolApproved(override_args=...)`, reject -> `ToolDenied(message=...)` with the
reviewer's reason, `answered_by` = the reviewers who decided) and runs the agent on; each call
is judged again and runs through the ledger. Anything ambiguous fails closed (`errors`), and a
resume that applies nothing releases the pause for the next one; a request whose time is up
counts as decided (its expiry recorded, a denial). While the resumed run goes on its claim is
renewed (a long resume is not taken over and run twice); a run that pauses again ends the old
pause and keeps the new one in one statement. Agents with native tools (run by the provider,
past the toolset) are refused.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import TypeAdapter
from pydantic_ai import Agent
from pydantic_ai.agent import AgentRunResult
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter, ModelResponse
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied

from adapters.runtime import ToolSpec, ready
from adapters.runtime import run as run_call
from adapters.runtime.policy import DATABASE_SETS, PolicyChoice, point_of, specs_by_name
from approvals import (
    Approval,
    ApprovalPolicy,
    ApprovalStatus,
    ApprovalStore,
    DecisionKind,
    UnknownApproval,
)
from approvals.policies import PolicyPoint
from ledger.calls.model import CallContext, ToolCall
from ledger.calls.service import ToolLedger
from ledger.log import get_logger
from ledger.pauses import PausedRun, PausedRuns

from .errors import (
    ApprovalsPending,
    DuplicateToolCallId,
    UnboundResult,
    UnsupportedDeferral,
    UnsupportedNativeTool,
)
from .toolset import APPROVAL_KEY, Governing, Resumed, RunScope, model_text, native_kinds

__all__ = ["DATABASE_SETS", "FRAMEWORK", "Signoff", "SignoffRun"]

FRAMEWORK = "pydantic_ai"
log = get_logger(__name__)

_REQUESTS = TypeAdapter(DeferredToolRequests)


@dataclass(frozen=True)
class SignoffRun:
    """How a run ended: `output` when it finished; `pause_id` (and `waiting`, the approval ids)
    when it waits for decisions. `result` is Pydantic AI's own."""

    run_id: str
    result: AgentRunResult[Any]
    pause_id: str | None = None
    waiting: tuple[str, ...] = ()

    @property
    def paused(self) -> bool:
        return self.pause_id is not None

    @property
    def output(self) -> Any:
        return None if self.paused else self.result.output


@dataclass
class Signoff:
    """A database's ledger, approval store and paused runs, with a spec per tool (`default` for
    others; its name is ignored) and the policy decision point that judges every call.

    `policy`: `DATABASE_SETS` (default) builds a point over the ledger's database (published
    sets govern with no code change; with none, each tool's spec decides) and `close()` closes
    it; a `PolicyPoint` is used as given; None: each tool's spec alone."""

    ledger: ToolLedger
    approvals: ApprovalStore
    pauses: PausedRuns
    specs: Sequence[ToolSpec] = ()
    default: ToolSpec = field(default_factory=lambda: ToolSpec("*"))
    requested_by: str = "agent"
    policy: PolicyChoice = DATABASE_SETS
    _by_name: dict[str, ToolSpec] = field(init=False, repr=False)
    _own_point: PolicyPoint | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        self._by_name = specs_by_name(self.specs)
        self.policy, self._own_point = point_of(self.policy, self.ledger)

    @property
    def point(self) -> PolicyPoint | None:
        return self.policy if isinstance(self.policy, PolicyPoint) else None

    async def close(self) -> None:
        """Close the policy decision point this object built (nothing it was given)."""
        if self._own_point is not None:
            await self._own_point.close()

    async def __aenter__(self) -> Signoff:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def spec(self, name: str, *, asks: bool = False) -> ToolSpec:
        """The spec of tool `name`; `asks` (made with `requires_approval=True`): when the spec
        names no approval, four-eyes (any reviewer the directory lists, never the requester)."""
        spec = self._by_name.get(name) or replace(self.default, name=name)
        if asks and spec.approval is None:
            spec = replace(spec, approval=ApprovalPolicy(any_reviewer=True))
        return spec

    async def run(
        self,
        agent: Agent[Any, Any],
        prompt: str | None,
        *,
        run_id: str,
        requested_by: str | None = None,
        message_history: Sequence[ModelMessage] | None = None,
        **kwargs: Any,
    ) -> SignoffRun:
        """Run `agent` on `prompt` as Signoff run `run_id`, asked for by `requested_by` (default:
        `requested_by` of this object); `kwargs` go to `agent.run` (`deps`, `model`, ...).

        Raises:
            UnsupportedNativeTool: the agent or the run has native tools; nothing ran.
            UnsupportedDeferral: the run deferred calls Signoff does not answer.
            DuplicateToolCallId: the deferred requests repeat a call id.
        """
        _refuse_native(agent, kwargs)
        scope = RunScope(run_id, requested_by or self.requested_by)
        result = await self._agent_run(
            agent, scope, prompt, message_history=message_history, **kwargs
        )
        return await self._ended(result, scope)

    async def resume(self, agent: Agent[Any, Any], pause_id: str, **kwargs: Any) -> SignoffRun:
        """Go on from pause `pause_id` with the decisions the store holds; `kwargs` go to
        `agent.run`.

        Raises:
            UnsupportedNativeTool: the agent or the run has native tools; nothing ran.
            UnknownPause: no such pause.
            PauseTaken: it was resumed already, or another worker is resuming it.
            ResumeRefused: (`DuplicateToolCallId`, `UnboundResult`, `ApprovalsPending`) its
                requests or approvals are ambiguous or not final; nothing is applied and the
                pause is released for the next resume.
            UnsupportedDeferral: the resumed run deferred calls Signoff does not answer.
        """
        _refuse_native(agent, kwargs)
        paused = await self.pauses.claim(pause_id)
        try:
            if paused.framework != FRAMEWORK:
                raise UnboundResult(pause_id, f"it is a {paused.framework} pause")
            state = json.loads(paused.state)
            messages = ModelMessagesTypeAdapter.validate_python(state["messages"])
            requests = _REQUESTS.validate_python(state["requests"])
            scope = RunScope(paused.run_id, str(state["requested_by"]))
            approvals = await self._approvals(paused, messages, requests)
        except Exception:
            await self.pauses.release(paused)  # nothing applied: the next resume need not wait
            raise
        async with self.pauses.holding(paused):  # a long run is not taken over and run twice
            results, resumed = await self._results(paused, requests, approvals)
            result = await self._agent_run(
                agent,
                replace(scope, resumed=resumed),
                None,
                message_history=messages,
                deferred_tool_results=results,
                **kwargs,
            )
            return await self._ended(result, scope, paused)

    async def _agent_run(
        self, agent: Agent[Any, Any], scope: RunScope, prompt: str | None, **kwargs: Any
    ) -> AgentRunResult[Any]:
        wanted = agent.output_type
        types = list(wanted) if isinstance(wanted, Sequence) else [wanted]
        if DeferredToolRequests not in types:
            types.append(DeferredToolRequests)
        capabilities = [*kwargs.pop("capabilities", ()), Governing(self, scope)]
        return await agent.run(prompt, output_type=types, capabilities=capabilities, **kwargs)

    async def _ended(
        self, result: AgentRunResult[Any], scope: RunScope, resumed: PausedRun | None = None
    ) -> SignoffRun:
        """The run as it ended: paused (its state kept server-side) when it deferred calls; a
        resumed pause ends with it, or gives way to the next pause in one statement."""
        output = result.output
        if not isinstance(output, DeferredToolRequests):
            if resumed is not None:
                await self.pauses.finish(resumed)
            return SignoffRun(scope.run_id, result)
        if output.calls:
            names = sorted({c.tool_name for c in output.calls})
            raise UnsupportedDeferral(f"the run deferred calls Signoff does not answer: {names}")
        ids = [c.tool_call_id for c in output.approvals]
        if repeated := sorted(i for i, n in Counter(ids).items() if n > 1):
            raise DuplicateToolCallId("(not paused)", f"the requests repeat call ids {repeated}")
        waiting = []
        for part in output.approvals:
            approval_id = (output.metadata.get(part.tool_call_id) or {}).get(APPROVAL_KEY)
            if not isinstance(approval_id, str):
                raise UnsupportedDeferral(
                    f"{part.tool_name} asked for an approval Signoff did not ask for"
                )
            waiting.append(approval_id)
        state = {
            "messages": ModelMessagesTypeAdapter.dump_python(result.all_messages(), mode="json"),
            "requests": _REQUESTS.dump_python(output, mode="json"),
            "requested_by": scope.requested_by,
        }
        text = json.dumps(state)
        if resumed is None:
            pause_id = await self.pauses.pause(scope.run_id, FRAMEWORK, text, waiting)
        else:
            pause_id = await self.pauses.pause_again(resumed, text, waiting)
        return SignoffRun(scope.run_id, result, pause_id, tuple(waiting))

    async def _approvals(
        self, paused: PausedRun, messages: list[ModelMessage], requests: DeferredToolRequests
    ) -> dict[str, Approval]:
        """Each paused call's approval (by call id), checked and final, before any is applied.

        Raises:
            DuplicateToolCallId, UnboundResult, ApprovalsPending: as `resume`.
        """
        pause_id = paused.pause_id
        calls = _open_calls(pause_id, messages)
        if requests.calls:
            raise UnboundResult(pause_id, "it defers calls Signoff does not answer")
        ids = [c.tool_call_id for c in requests.approvals]
        if repeated := sorted(i for i, n in Counter(ids).items() if n > 1):
            raise DuplicateToolCallId(pause_id, f"its requests repeat call ids {repeated}")
        found: dict[str, Approval] = {}
        for part in requests.approvals:
            call_id = part.tool_call_id
            if calls.get(call_id) != part.tool_name:
                raise UnboundResult(
                    pause_id, f"call {call_id} ({part.tool_name}) is not in the paused response"
                )
            approval = await self._approval(paused, requests, call_id, part.tool_name)
            if approval.status is ApprovalStatus.PENDING:
                raise ApprovalsPending(
                    pause_id, f"approval {approval.approval_id} ({part.tool_name}) is pending"
                )
            found[call_id] = approval
        if sorted(a.approval_id for a in found.values()) != sorted(paused.approval_ids):
            raise UnboundResult(pause_id, "its approvals are not the ones it paused for")
        return found

    async def _results(
        self, paused: PausedRun, requests: DeferredToolRequests, approvals: dict[str, Approval]
    ) -> tuple[DeferredToolResults, dict[str, Resumed]]:
        """The results of the paused calls, from the store's decisions alone (a refused call
        recorded in the ledger), and the calls that run."""
        results = DeferredToolResults()
        resumed: dict[str, Resumed] = {}
        for part in requests.approvals:
            call_id = part.tool_call_id
            approval = approvals[call_id]
            decision = await self.approvals.final_decision(approval)
            results.answered_by[call_id] = ", ".join(approval.decided_by)
            args = dict(approval.args or {})
            if decision.kind is DecisionKind.APPROVE:
                results.approvals[call_id] = True
            elif decision.kind is DecisionKind.EDIT and decision.args is not None:
                results.approvals[call_id] = ToolApproved(override_args=dict(decision.args))
            else:
                message = await self._refused(paused.run_id, call_id, part.tool_name, approval)
                results.approvals[call_id] = ToolDenied(message)
                continue
            resumed[call_id] = Resumed(approval.approval_id, args)
        return results, resumed

    async def _approval(
        self, paused: PausedRun, requests: DeferredToolRequests, call_id: str, tool: str
    ) -> Approval:
        """The store's approval of a paused call, for this run, call and tool.

        Raises:
            UnboundResult: none, or one for another run, call or tool.
        """
        approval_id = (requests.metadata.get(call_id) or {}).get(APPROVAL_KEY)
        if not isinstance(approval_id, str) or approval_id not in paused.approval_ids:
            raise UnboundResult(paused.pause_id, f"call {call_id} names no approval it paused for")
        try:
            approval = await self.approvals.get(approval_id, reveal=True)
        except UnknownApproval:
            raise UnboundResult(
                paused.pause_id, f"the store has no approval {approval_id}"
            ) from None
        if (approval.run_id, approval.call_id, approval.tool) != (paused.run_id, call_id, tool):
            raise UnboundResult(
                paused.pause_id, f"approval {approval_id} is for another run, call or tool"
            )
        if not approval.status.final and ready(approval):
            # Due but not marked expired yet: record the expiry, a denial like any other.
            await self.approvals.wait(approval_id, 0)
            approval = await self.approvals.get(approval_id, reveal=True)
        return approval

    async def _refused(self, run_id: str, call_id: str, tool: str, approval: Approval) -> str:
        """Record a call the store's decision does not run (rejected, answered, expired,
        cancelled) through the ledger (the approval consumed, nothing run); what the model reads."""

        async def never(args: dict[str, Any], context: CallContext) -> Any:
            raise AssertionError("a refused call never runs")  # the gate denies or responds

        call = ToolCall(run_id, call_id, tool, dict(approval.args or {}))
        outcome = await run_call(
            self.ledger, self.approvals, self.spec(tool), call, never, approval.approval_id
        )
        if outcome.result is not None and outcome.error is None:
            return str(outcome.result)  # a reviewer's answer in place of the tool's
        return model_text(outcome, tool)


def _refuse_native(agent: Agent[Any, Any], kwargs: dict[str, Any]) -> None:
    """Refuse an agent (or a run) with native tools before anything runs: the provider runs
    them, past the toolset (`Governing` refuses any that show up later in a request).

    Raises:
        UnsupportedNativeTool: there are some.
    """
    tools = [*agent.root_capability.get_native_tools()]
    for capability in kwargs.get("capabilities") or ():
        if isinstance(capability, AbstractCapability):
            tools.extend(capability.get_native_tools())
    if kinds := native_kinds(tools):
        raise UnsupportedNativeTool(kinds)


def _open_calls(pause_id: str, messages: list[ModelMessage]) -> dict[str, str]:
    """The tool calls of the newest model response (call id -> tool name).

    Raises:
        DuplicateToolCallId: it repeats an id (pydantic-ai#5761).
        UnboundResult: the history holds no model response.
    """
    response = next((m for m in reversed(messages) if isinstance(m, ModelResponse)), None)
    if response is None:
        raise UnboundResult(pause_id, "its history holds no model response")
    counted = Counter(c.tool_call_id for c in response.tool_calls)
    if repeated := sorted(i for i, n in counted.items() if n > 1):
        raise DuplicateToolCallId(pause_id, f"its model response repeats call ids {repeated}")
    return {c.tool_call_id: c.tool_name for c in response.tool_calls}
