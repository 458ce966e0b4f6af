"""The tools of an OpenAI Agents SDK agent, run through Signoff: each `FunctionTool` is copied
with a `needs_approval` that asks Signoff and an `on_invoke_tool` that runs through the ledger.

`needs_approval(context, params, call_id)`: the policy decision point judges the call (the
tool's spec, or the tool's own `needs_approval`, when no set decides); an approval verdict
requests the approval in the store, bound to the run, tool, the SDK's call id and the
arguments, and pauses the run (True) until the store holds a final decision. A call the ledger
has already, an allowed one and a denied one do not pause (False): the invocation replays,
runs, or records the denial.

`on_invoke_tool(context, arguments)`: judged again (a set published meanwhile decides), then
`runtime.run`: a finished call replays, a single-attempt call whose worker died is
`outcome_unknown`, the approval is consumed in the intent's transaction (an edit runs with the
reviewer's arguments), a denial is recorded. The model reads every outcome as the tool's
output, never as an exception. The wrappers read nothing from the SDK's run context, so an
application's own `context` changes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from agents import Agent, FunctionTool, Handoff, RunContextWrapper
from agents.tool_context import ToolContext
from pydantic import BaseModel

from adapters.runtime import ToolSpec, ask, governed, judge, ready
from adapters.runtime import run as run_call
from approvals import ApprovalPending, ApprovalPolicy, ApprovalStore
from approvals.policies import Outcome, PolicyPoint, Verdict
from ledger.calls.model import CallContext, CallOutcome, CallStatus, ToolCall
from ledger.calls.service import ToolLedger
from ledger.errors import UnknownCall

from .errors import NotApprovedInSignoff, UnsupportedTool

__all__ = ["Governance", "RunScope", "outcome_text", "wrap_agent"]


@dataclass(frozen=True)
class Governance:
    """What every wrapped tool shares: the ledger, the store, the specs by tool name, the
    default spec (for tools without one; its name is ignored), the policy decision point and
    the approval policy a tool's own `needs_approval` stands for."""

    ledger: ToolLedger
    approvals: ApprovalStore
    specs: Mapping[str, ToolSpec]
    default: ToolSpec
    point: PolicyPoint | None
    approval: ApprovalPolicy

    def spec_of(self, name: str) -> ToolSpec:
        """The spec of the tool of that name (the default, named so, for any other)."""
        return self.specs.get(name) or replace(self.default, name=name)


@dataclass
class RunScope:
    """One run: its Signoff run id, who asks for its calls (the policy's principal and the
    approvals' requester) and the approvals its calls asked for, by call id."""

    run_id: str
    requested_by: str
    asked: dict[str, str] = field(default_factory=dict)


def wrap_agent(agent: Agent[Any], gov: Governance, scope: RunScope) -> Agent[Any]:
    """A copy of `agent` and of the agents it hands off to, whose function tools run through
    Signoff for `scope`'s run. The originals are left as they are.

    Raises:
        UnsupportedTool: a tool other than a `FunctionTool`, an agent as a tool, MCP servers,
            or a `Handoff` object.
        ValueError: two agents of the graph share a name (a paused state names agents).
    """
    done: dict[int, Agent[Any]] = {}
    names: set[str] = set()

    def copy(original: Agent[Any]) -> Agent[Any]:
        if id(original) in done:
            return done[id(original)]
        if original.name in names:
            raise ValueError(f"two agents are named {original.name!r}: names must be unique")
        names.add(original.name)
        if original.mcp_servers:
            # The SDK turns their tools into function tools at run time, past the wrappers.
            raise UnsupportedTool(
                f"{original.name}: MCP servers' tools do not run through Signoff's ledger; "
                "put the MCP server behind Signoff's MCP gateway, or wrap its tools as "
                "function tools"
            )
        clone = original.clone(tools=[], handoffs=[])
        done[id(original)] = clone
        clone.tools = [_governed(tool, gov, scope) for tool in original.tools]
        handoffs: list[Agent[Any] | Handoff[Any, Any]] = []
        for target in original.handoffs:
            if not isinstance(target, Agent):
                raise UnsupportedTool(
                    f"{original.name}: a Handoff object cannot be wrapped; hand off to the "
                    "Agent itself"
                )
            handoffs.append(copy(target))
        clone.handoffs = handoffs
        return clone

    return copy(agent)


def _governed(tool: Any, gov: Governance, scope: RunScope) -> FunctionTool:
    if not isinstance(tool, FunctionTool):
        raise UnsupportedTool(
            f"{type(tool).__name__} {getattr(tool, 'name', '')!r} does not run through "
            "Signoff's ledger; only function tools do"
        )
    if getattr(tool, "_is_agent_tool", False) or getattr(tool, "_agent_instance", None):
        # `Agent.as_tool()`: the inner agent runs its own tools, which no wrapper sees.
        raise UnsupportedTool(
            f"agent tool {tool.name!r} runs its agent's tools outside Signoff's ledger; "
            "hand off to the agent instead"
        )
    governed_tool = _GovernedTool(tool, gov, scope)
    return replace(
        tool,
        needs_approval=governed_tool.needs_approval,
        on_invoke_tool=governed_tool.invoke,
    )


class _GovernedTool:
    def __init__(self, tool: FunctionTool, gov: Governance, scope: RunScope) -> None:
        self.tool = tool
        self.gov = gov
        self.scope = scope

    async def spec(
        self, context: RunContextWrapper[Any] | None, args: dict[str, Any], call_id: str
    ) -> ToolSpec:
        """The tool's spec; without an approval policy of its own, the tool's own
        `needs_approval` asks for `Governance.approval` (a callable one is asked here, with the
        SDK's context when there is one)."""
        spec = self.gov.spec_of(self.tool.name)
        if spec.approval is not None:
            return spec
        own = self.tool.needs_approval
        wanted = (
            own
            if isinstance(own, bool)
            else context is not None and bool(await own(context, args, call_id))
        )
        if not wanted:
            return spec
        approval = self.gov.approval
        if approval.args_schema is None and self.tool.params_json_schema:
            approval = replace(approval, args_schema=self.tool.params_json_schema)
        return replace(spec, approval=approval)

    async def judge(self, spec: ToolSpec, call: ToolCall) -> Verdict:
        schema = self.tool.params_json_schema if self.gov.point is not None else None
        return await judge(
            self.gov.point, spec, call, self.scope.requested_by, args_schema=schema or None
        )

    async def needs_approval(
        self, context: RunContextWrapper[Any], params: dict[str, Any], call_id: str
    ) -> bool:
        """Whether the SDK pauses the run for this call: an approval verdict whose request
        the store has not decided yet."""
        call = ToolCall(self.scope.run_id, call_id, self.tool.name, dict(params))
        spec = await self.spec(context, call.args, call_id)
        verdict = await self.judge(spec, call)
        if verdict.outcome is not Outcome.APPROVAL:
            return False  # allowed runs; denied is recorded as denied when invoked
        try:
            await self.gov.ledger.get(call.run_id, call_id)
            return False  # recorded already: the invocation replays it, nobody is asked again
        except UnknownCall:
            pass
        approval = await ask(
            self.gov.approvals,
            governed(spec, verdict),
            call,
            self.scope.requested_by,
            verdict=verdict,
        )
        self.scope.asked[call_id] = approval.approval_id
        return not ready(approval)

    async def invoke(self, context: ToolContext[Any], arguments: str) -> Any:
        """Run the call through the ledger; the model reads its outcome."""
        try:
            args = json.loads(arguments or "{}")
        except ValueError:
            args = None
        if not isinstance(args, dict):
            return (
                f"The call to `{self.tool.name}` was refused: its arguments are not a JSON object."
            )
        call = ToolCall(self.scope.run_id, context.tool_call_id, self.tool.name, args)
        spec = await self.spec(context, args, call.call_id)
        verdict = await self.judge(spec, call)
        approval_id = None
        if verdict.outcome is Outcome.APPROVAL:
            # The same request returns the approval asked for when the run paused.
            approval = await ask(
                self.gov.approvals,
                governed(spec, verdict),
                call,
                self.scope.requested_by,
                verdict=verdict,
            )
            approval_id = approval.approval_id
        original = self.tool.on_invoke_tool

        async def fn(run_args: dict[str, Any], _: CallContext) -> Any:
            # `run_args` are the reviewer's when the decision was an edit.
            return _recordable(await original(context, json.dumps(run_args)))

        async def judge_again(again: ToolCall) -> Verdict:
            return await self.judge(spec, again)

        try:
            outcome = await run_call(
                self.gov.ledger,
                self.gov.approvals,
                governed(spec, verdict),
                call,
                fn,
                approval_id,
                verdict=verdict,
                judge_again=judge_again,
            )
        except ApprovalPending:
            assert approval_id is not None
            raise NotApprovedInSignoff(self.tool.name, call.call_id, approval_id) from None
        return outcome_text(outcome, self.tool.name)


def _recordable(result: Any) -> Any:
    """A tool's result as the ledger records it (JSON): models as their JSON, anything else
    the SDK would send as text as that text."""
    if result is None or isinstance(result, str | int | float | bool | list | dict):
        return result
    if isinstance(result, BaseModel):
        return result.model_dump(mode="json")
    return str(result)


def outcome_text(outcome: CallOutcome, name: str) -> Any:
    """What the model reads for an outcome: the result, or why there is none."""
    status = outcome.status
    if status in (CallStatus.SUCCEEDED, CallStatus.RESPONDED):
        result = outcome.result
        return result if isinstance(result, str) else json.dumps(result)
    if status is CallStatus.DENIED and outcome.approval_id is None:
        return f"Signoff's policy refused the call to `{name}`: {outcome.error}. It did not run."
    if status is CallStatus.DENIED:
        return rejected_text(name, outcome.error)
    if status is CallStatus.OUTCOME_UNKNOWN:
        return (
            f"The outcome of the call to `{name}` is unknown: it may or may not have taken "
            f"effect ({outcome.error}). Do not call it again; a person will check and resolve it."
        )
    return f"The call to `{name}` failed: {outcome.error}"


def rejected_text(name: str, reason: str | None) -> str:
    """What the model reads for a call a reviewer rejected."""
    return (
        f"A reviewer rejected the call to `{name}`: {reason or 'no reason given'}. It did not run."
    )
