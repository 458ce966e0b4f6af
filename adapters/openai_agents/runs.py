"""Runs of an OpenAI Agents SDK agent whose tool calls go through Signoff, paused server-side.

```
signoff = SignoffAgents(ledger, approvals, pauses, specs=[...])
done = await signoff.run(agent, "refund A-1042", run_id="r-1", requested_by="dana")
# done.pause_id, done.approval_ids: reviewers decide in the inbox / API / CLI
done = await signoff.resume(agent, done.pause_id)   # any process, once
```

A run that ends with interruptions keeps `result.to_state().to_json()` in `PausedRuns` (sealed,
server-side) and hands the application the pause id and the approval ids, never the state.
`resume` claims the pause (a second resume raises `PauseTaken`), restores the state with
`RunState.from_json`, checks it against the store, applies the store's decisions and runs on.

The check fails closed before anything is applied (`AmbiguousRunState`, `ApprovalsPending`):
each interruption is a function call of an agent and tool of the graph, its call id is used
once, the SDK restores every one of them, the state carries no approvals of the SDK's own, and
each has its own approval in the pause, for exactly this run, tool, call id and arguments. The
claim is then released: nothing of the state was used, and the next resume (after the
decision, or by a worker whose code knows the agent) takes it at once. A request whose time is
up counts as decided: its expiry is recorded and the item rejected.

Once the check passes, the claim's lease is renewed while the run goes on (a long resume is
not taken over and run twice); a run that pauses again ends the old pause and keeps the new
one in one statement (`PausedRuns.pause_again`).

Decisions come from the store only: approve and edit approve the item in the SDK (the ledger
then runs the call with the approved or the reviewer's edited arguments and consumes the
approval in the intent); respond approves it too (the ledger returns the reviewer's answer as
the tool's output, nothing runs); reject, expired and cancelled reject the item with the
reviewer's reason as the rejection message, and the denial is recorded in the ledger first.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agents import Agent, RunConfig, Runner, RunResult, RunState, ToolApprovalItem

from adapters.runtime import ToolSpec, ready
from adapters.runtime import run as run_call
from adapters.runtime.policy import DATABASE_SETS, PolicyChoice, point_of, specs_by_name
from approvals import Approval, ApprovalPolicy, ApprovalStatus, ApprovalStore, UnknownApproval
from approvals.policies import PolicyPoint
from ledger.calls.model import CallContext, ToolCall
from ledger.calls.service import ToolLedger
from ledger.canonical import canonical_json
from ledger.keys.digests import matches
from ledger.log import get_logger
from ledger.pauses import PausedRun, PausedRuns

from .errors import AmbiguousRunState, ApprovalsPending
from .tools import Governance, RunScope, rejected_text, wrap_agent

__all__ = ["DATABASE_SETS", "FRAMEWORK", "Finished", "Paused", "SignoffAgents"]

log = get_logger(__name__)

FRAMEWORK = "openai_agents"
"""The framework name the pauses of this adapter carry."""
_VERSION = 1


@dataclass(frozen=True)
class Finished:
    """The run ended: the SDK's result."""

    run_id: str
    result: RunResult


@dataclass(frozen=True)
class Paused:
    """The run waits for approvals: resume it by `pause_id` once they are decided."""

    run_id: str
    pause_id: str
    approval_ids: tuple[str, ...]


@dataclass
class SignoffAgents:
    """Runs agents with every function tool call through Signoff's ledger and policy.

    `specs` say how each tool is treated (effect, approval policy, once per run); a tool
    without one gets `default` (named after it), and a tool whose own `needs_approval` says so
    asks for `approval` (default: four-eyes, any reviewer the directory lists). Close it (or
    `async with`) when it built its own policy decision point (`policy`'s default)."""

    ledger: ToolLedger
    approvals: ApprovalStore
    pauses: PausedRuns
    specs: Sequence[ToolSpec] = ()
    default: ToolSpec = field(default_factory=lambda: ToolSpec("*"))
    approval: ApprovalPolicy = field(default_factory=lambda: ApprovalPolicy(any_reviewer=True))
    requested_by: str = "agent"
    policy: PolicyChoice = DATABASE_SETS
    """A policy decision point; `DATABASE_SETS` builds one over the ledger's database (with no
    set published each tool's spec decides); None: each tool's spec alone."""
    _by_name: dict[str, ToolSpec] = field(init=False, repr=False)
    _own_point: PolicyPoint | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        self._by_name = specs_by_name(self.specs)
        self.policy, self._own_point = point_of(self.policy, self.ledger)

    async def close(self) -> None:
        """Close the policy decision point this object built (nothing it was given)."""
        if self._own_point is not None:
            await self._own_point.close()

    async def __aenter__(self) -> SignoffAgents:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _governance(self) -> Governance:
        point = self.policy if isinstance(self.policy, PolicyPoint) else None
        return Governance(
            self.ledger, self.approvals, self._by_name, self.default, point, self.approval
        )

    def wrap(self, agent: Agent[Any], run_id: str, requested_by: str | None = None) -> Agent[Any]:
        """A copy of `agent` (and of the agents it hands off to) whose function tools run
        through Signoff as calls of run `run_id`, for running with `Runner` directly: then the
        application keeps the paused state itself, and only `run`/`resume` keep it sealed
        server-side and apply the store's decisions.

        Raises:
            UnsupportedTool: a tool Signoff cannot govern.
        """
        return wrap_agent(
            agent, self._governance(), RunScope(run_id, requested_by or self.requested_by)
        )

    async def run(
        self,
        agent: Agent[Any],
        input: str | list[Any],
        *,
        run_id: str,
        requested_by: str | None = None,
        context: Any = None,
        max_turns: int = 10,
        run_config: RunConfig | None = None,
    ) -> Finished | Paused:
        """Run `agent` on `input` as Signoff run `run_id`, on behalf of `requested_by` (the
        policy's principal and the approvals' requester; default `requested_by`).

        Raises:
            UnsupportedTool: the agent has a tool Signoff cannot govern.
            AmbiguousRunState: the run paused on a call Signoff did not ask about.
            Whatever `Runner.run` raises (`NotApprovedInSignoff` from a tool among them).
        """
        scope = RunScope(run_id, requested_by or self.requested_by)
        wrapped = wrap_agent(agent, self._governance(), scope)
        result = await Runner.run(
            wrapped, input, context=context, max_turns=max_turns, run_config=run_config
        )
        return await self._settle(result, scope, None)

    async def resume(
        self,
        agent: Agent[Any],
        pause_id: str,
        *,
        context: Any = None,
        max_turns: int = 10,
        run_config: RunConfig | None = None,
    ) -> Finished | Paused:
        """Resume the paused run `pause_id` with the decisions of the store; `context`, when
        given, replaces the context kept with the state.

        Raises:
            UnknownPause: no such pause.
            PauseTaken: it was resumed already, or another worker is resuming it.
            AmbiguousRunState, ApprovalsPending, UnsupportedTool: nothing applied, the pause
                released for the next resume (see the module).
            Whatever `Runner.run` raises.
        """
        paused = await self.pauses.claim(pause_id)
        try:
            envelope = _envelope(paused)
            scope = RunScope(paused.run_id, str(envelope["requested_by"]))
            wrapped = wrap_agent(agent, self._governance(), scope)
            raw_state: dict[str, Any] = envelope["state"]
            raw_items = _raw_interruptions(paused.pause_id, raw_state, wrapped)
            state = await RunState.from_json(wrapped, raw_state, context_override=context)
            items = state.get_interruptions()
            if len(items) != len(raw_items):
                raise AmbiguousRunState(
                    pause_id, f"the SDK restored {len(items)} of {len(raw_items)} approval items"
                )
            approvals = await self._approvals_of(paused, items)
            pending = [a.approval_id for a in approvals.values() if not a.status.final]
            if pending:
                raise ApprovalsPending(pause_id, pending)
        except Exception:
            await self.pauses.release(paused)  # nothing applied: the next resume need not wait
            raise
        async with self.pauses.holding(paused):  # a long run is not taken over and run twice
            for item in items:
                await self._apply(state, item, approvals[_call_id(item)], scope)
            result = await Runner.run(wrapped, state, max_turns=max_turns, run_config=run_config)
            return await self._settle(result, scope, paused)

    async def _settle(
        self, result: RunResult, scope: RunScope, resumed: PausedRun | None
    ) -> Finished | Paused:
        """The run as it ended; a resumed pause ends with it (or gives way to the next pause)."""
        if not result.interruptions:
            if resumed is not None:
                await self.pauses.finish(resumed)
            return Finished(scope.run_id, result)
        asked = []
        for item in result.interruptions:
            approval_id = scope.asked.get(_call_id(item))
            if approval_id is None:
                raise AmbiguousRunState(
                    "(new)" if resumed is None else resumed.pause_id,
                    f"the SDK paused on {item.tool_name!r} call {_call_id(item)!r}, which "
                    "Signoff did not ask about (arguments that are not a JSON object?)",
                )
            asked.append(approval_id)
        envelope = {
            "version": _VERSION,
            "requested_by": scope.requested_by,
            "state": result.to_state().to_json(),
        }
        text = json.dumps(envelope)
        if resumed is None:
            pause_id = await self.pauses.pause(scope.run_id, FRAMEWORK, text, asked)
        else:  # the old pause ends and the new one is kept in one statement
            pause_id = await self.pauses.pause_again(resumed, text, asked)
        return Paused(scope.run_id, pause_id, tuple(asked))

    async def _approvals_of(
        self, paused: PausedRun, items: list[ToolApprovalItem]
    ) -> dict[str, Approval]:
        """Each item's own approval, from the pause's list: for exactly its run, tool, call id
        and arguments, one per item, none left over."""
        found: dict[str, Approval] = {}
        for approval_id in paused.approval_ids:
            try:
                approval = await self.approvals.get(approval_id)
            except UnknownApproval:
                raise AmbiguousRunState(
                    paused.pause_id, f"the store has no approval {approval_id}"
                ) from None
            if not approval.status.final and ready(approval):
                # Due but not marked expired yet: record the expiry, a denial like any other.
                approval = await self.approvals.wait(approval_id, 0)
            if approval.run_id != paused.run_id:
                raise AmbiguousRunState(paused.pause_id, f"approval {approval_id} is another run's")
            if approval.call_id in found:
                raise AmbiguousRunState(
                    paused.pause_id, f"two approvals for call {approval.call_id!r}"
                )
            found[approval.call_id] = approval
        for item in items:
            own = found.get(_call_id(item))
            if own is None or own.tool != item.tool_name:
                raise AmbiguousRunState(
                    paused.pause_id,
                    f"no approval in the store for {item.tool_name!r} call {_call_id(item)!r}",
                )
            if not await matches(self.approvals.ring, own.args_digest, canonical_json(_args(item))):
                raise AmbiguousRunState(
                    paused.pause_id,
                    f"approval {own.approval_id} is for other arguments than the state's",
                )
        if len(found) != len(items):
            raise AmbiguousRunState(paused.pause_id, "the pause names approvals of no item")
        return found

    async def _apply(
        self,
        state: RunState[Any, Agent[Any]],
        item: ToolApprovalItem,
        approval: Approval,
        scope: RunScope,
    ) -> None:
        """Apply the store's decision on `approval` to `item`."""
        if approval.status.runs_tool or approval.status is ApprovalStatus.RESPONDED:
            state.approve(item)  # the ledger runs the approved or edited arguments
            return
        decision = await self.approvals.final_decision(approval)
        reason = decision.reason

        async def never(args: dict[str, Any], context: CallContext) -> Any:
            raise AssertionError("a rejected call never runs")

        # The reviewer's denial in the ledger (the approval gate consumes the rejection).
        call = ToolCall(scope.run_id, _call_id(item), item.tool_name or "", _args(item))
        spec = self._governance().spec_of(call.tool)
        await run_call(self.ledger, self.approvals, spec, call, never, approval.approval_id)
        state.reject(item, rejection_message=rejected_text(call.tool, reason))


def _envelope(paused: PausedRun) -> dict[str, Any]:
    if paused.framework != FRAMEWORK:
        raise AmbiguousRunState(paused.pause_id, f"it is a {paused.framework!r} pause")
    envelope = json.loads(paused.state)
    if not isinstance(envelope, dict) or envelope.get("version") != _VERSION:
        raise AmbiguousRunState(paused.pause_id, "its state is not this adapter's")
    return envelope


def _raw_interruptions(
    pause_id: str, raw_state: dict[str, Any], agent: Agent[Any]
) -> list[dict[str, Any]]:
    """The approval items of the state as stored, each checked against the agent graph."""
    tools: dict[str, set[str]] = {}

    def walk(a: Agent[Any]) -> None:
        if a.name in tools:
            return
        tools[a.name] = {getattr(t, "name", "") for t in a.tools}
        for h in a.handoffs:
            if isinstance(h, Agent):
                walk(h)

    walk(agent)
    approvals = (raw_state.get("context") or {}).get("approvals") or {}
    if approvals:
        raise AmbiguousRunState(pause_id, "the state carries approvals of the SDK's own")
    step = raw_state.get("current_step") or {}
    items = (step.get("data") or {}).get("interruptions") or []
    seen: set[str] = set()
    for raw in items:
        raw_item = raw.get("raw_item") or {}
        agent_name = (raw.get("agent") or {}).get("name")
        tool = raw.get("tool_name")
        call_id = raw_item.get("call_id")
        if raw.get("type") != "tool_approval_item" or raw_item.get("type") != "function_call":
            raise AmbiguousRunState(pause_id, "an approval item is not a function call")
        if agent_name not in tools:
            raise AmbiguousRunState(
                pause_id, f"an approval item names unknown agent {agent_name!r}"
            )
        if tool not in tools[agent_name]:
            raise AmbiguousRunState(pause_id, f"agent {agent_name!r} has no tool {tool!r}")
        if not call_id or call_id in seen:
            raise AmbiguousRunState(pause_id, f"call id {call_id!r} is missing or used twice")
        seen.add(call_id)
    return list(items)


def _call_id(item: ToolApprovalItem) -> str:
    raw = item.raw_item
    call_id = raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", None)
    return str(call_id or "")


def _args(item: ToolApprovalItem) -> dict[str, Any]:
    raw = item.raw_item
    arguments = raw.get("arguments") if isinstance(raw, dict) else getattr(raw, "arguments", None)
    parsed = json.loads(arguments or "{}")
    return parsed if isinstance(parsed, dict) else {"arguments": parsed}
