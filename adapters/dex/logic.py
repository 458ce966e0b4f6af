"""What each Step and the decide RPC do, as plain async functions over the approval store and
the tool-call ledger, built on the adapters' runtime (`adapters.runtime`). The Dex wiring in
`flow.py` only calls these and turns their answers into Waits, movements and channel
messages, so everything here runs (and is tested) without a Dex server.

- `await_approval`: record the request in the store (`ask`: the same request again returns the
  same approval) and say whether the call may go on (a final decision, or expired) or how long
  the Step should wait for the decision or the expiry.
- `record_decision` / `decide_for_flow`: record a decision in the store by the runtime's rule
  (`decide_once`): the same decision again by the same reviewer is a success that writes
  nothing, a different one is `DecisionConflict`.
- `call_tool`: run the call through the ledger (`run`), consuming the approval in the intent's
  transaction; the ledger replays a finished call and turns a write whose worker died into
  `outcome_unknown`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from adapters.runtime import (
    DecisionRecord,
    ToolSpec,
    ask,
    decide_once,
    ready,
    require_ready,
    run,
    task_run_id,
)
from approvals import ApprovalStatus, ApprovalStore, Decision, Reviewer
from ledger.calls.model import CallContext, Effect, ToolCall, ToolFailed
from ledger.calls.service import ToolFunction, ToolLedger
from ledger.log import get_logger

from .errors import ApprovalNotForThisCall, RuntimeNotBound
from .values import DecideRequest, DecideResult, ToolCallRequest, ToolCallResult, channel_key

__all__ = [
    "ApprovalWait",
    "DecisionRecord",
    "DexTool",
    "SignoffDex",
    "await_approval",
    "call_tool",
    "decide_for_flow",
    "record_decision",
    "task_run_id",
]

log = get_logger(__name__)


@dataclass(frozen=True)
class DexTool:
    """A tool the Flow may run: its spec and its function.

    Attributes:
        spec: how Signoff treats it (name, effect, approval policy, once per run); an effect of
            None is single_attempt.
        fn: `async fn(args, context)`; `context.idempotency_key` is
            `<flowId>/<turnId>/<toolCallId>`, the same on every attempt.
    """

    spec: ToolSpec
    fn: ToolFunction

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def effect(self) -> Effect:
        """The effect the ledger runs it with (the retry policy of its Step follows it)."""
        return self.spec.ledger_policy().effect


def _no_such_tool(name: str) -> DexTool:
    async def refuse(args: dict[str, Any], context: CallContext) -> None:
        raise ToolFailed(f"the agent has no tool named {name!r}")

    return DexTool(ToolSpec(name, Effect.READ), refuse)


@dataclass
class SignoffDex:
    """What the Steps and the RPC of a Worker use: one store, one ledger, the tools by name.
    Open the store and the ledger once per process and share them."""

    store: ApprovalStore
    ledger: ToolLedger
    tools: Mapping[str, DexTool] = field(default_factory=dict)

    @classmethod
    def of(cls, store: ApprovalStore, ledger: ToolLedger, *tools: DexTool) -> SignoffDex:
        names = [t.name for t in tools]
        if len(set(names)) != len(names):
            raise ValueError(f"tool names must be unique: {names}")
        return cls(store, ledger, {t.name: t for t in tools})

    def tool(self, name: str) -> DexTool:
        """The tool of that name; an unknown name gets a read that records `failed`."""
        return self.tools.get(name) or _no_such_tool(name)


def require_runtime(runtime: SignoffDex | None, flow_type: str) -> SignoffDex:
    if runtime is None:
        raise RuntimeNotBound(
            f"Flow {flow_type} was built without a SignoffDex runtime; Workers need "
            "ToolCallFlow(SignoffDex.of(store, ledger, *tools))"
        )
    return runtime


# -- awaiting an approval ----------------------------------------------------------------------


@dataclass(frozen=True)
class ApprovalWait:
    """Where a call's approval stands.

    Attributes:
        ready: the call step may go on: a final decision, or the request expired (the call
            will be denied).
        timer: how long to wait for the expiry (whole seconds, as Dex timers need), or None
            when the policy never expires.
        channel_key: the decisions-channel instance the decide RPC signals.
    """

    approval_id: str
    status: ApprovalStatus
    ready: bool
    timer: timedelta | None
    channel_key: str


def _call(flow_id: str, request: ToolCallRequest) -> ToolCall:
    return ToolCall(flow_id, request.call_id, request.tool, request.args, turn_id=request.turn_id)


async def answered(
    ledger: ToolLedger, flow_id: str, request: ToolCallRequest, spec: ToolSpec
) -> bool:
    """Whether the ledger holds a final outcome that answers this call: its own, or for a
    once-per-run tool the run's call of that tool. `execute` only replays it, so nobody is
    asked to approve the call."""
    once = request.tool if spec.once_per_run else None
    record = await ledger.answering(flow_id, request.call_id, once)
    return record is not None and record.status.final


async def await_approval(
    store: ApprovalStore,
    flow_id: str,
    request: ToolCallRequest,
    spec: ToolSpec,
    *,
    now: datetime | None = None,
) -> ApprovalWait:
    """Record the approval request of a call (once: the same request returns the same
    approval) and say whether to go on or how long to wait."""
    approval = await ask(
        store, spec, _call(flow_id, request), request.requested_by, context=request.context
    )
    now = now or datetime.now(UTC)
    timer = None
    if approval.expires_at is not None:
        remaining = (approval.expires_at - now).total_seconds()
        timer = timedelta(seconds=max(1, math.ceil(remaining)))
    return ApprovalWait(
        approval_id=approval.approval_id,
        status=approval.status,
        ready=ready(approval, now),
        timer=timer,
        channel_key=channel_key(request.call_id),
    )


# -- decisions ---------------------------------------------------------------------------------


async def record_decision(
    store: ApprovalStore, approval_id: str, decision: Decision, reviewer: Reviewer | str
) -> DecisionRecord:
    """Record `decision` unless this reviewer gave it already (`adapters.runtime.decide_once`).

    Raises:
        DecisionConflict: the approval holds another decision, expired or was cancelled.
        UnknownApproval, ApprovalExpired, DecisionNotAllowed, InvalidApprovalRequest: as
            `ApprovalStore.decide`.
    """
    return await decide_once(store, approval_id, decision, reviewer)


async def decide_for_flow(
    store: ApprovalStore, flow_id: str, request: DecideRequest
) -> DecideResult:
    """The decide RPC's store half: check that the approval belongs to this Flow and call,
    then record the decision (a repeated delivery is a success).

    Raises:
        ApprovalNotForThisCall, DecisionConflict, and what `record_decision` raises.
    """
    approval = await store.get(request.approval_id)
    if approval.run_id != flow_id or approval.call_id != request.call_id:
        raise ApprovalNotForThisCall(request.approval_id, flow_id, request.call_id)
    recorded = await record_decision(store, request.approval_id, request.decision, request.who)
    return DecideResult(
        approval_id=request.approval_id,
        status=recorded.approval.status,
        duplicate=recorded.duplicate,
    )


# -- running the call --------------------------------------------------------------------------


async def call_tool(
    ledger: ToolLedger,
    store: ApprovalStore,
    flow_id: str,
    request: ToolCallRequest,
    tool: DexTool,
) -> ToolCallResult:
    """Run one call through `ToolLedger.execute`: replayed when finished, run at most as often
    as its effect allows, with its approval (if the tool needs one) consumed in the intent's
    transaction. An expired approval is consumed as a denial.

    Raises:
        ApprovalPending: the tool needs an approval that is neither decided nor expired.
        InvalidToolCall: malformed call, or the call id reused with other arguments.
    """
    call = _call(flow_id, request)
    bound = log.bind(run_id=flow_id, call_id=request.call_id, tool=request.tool)
    approval_id = None
    if tool.spec.approval is not None and not await answered(ledger, flow_id, request, tool.spec):
        approval = await ask(store, tool.spec, call, request.requested_by, context=request.context)
        require_ready(approval)
        approval_id = approval.approval_id
        bound = bound.bind(approval_id=approval_id)
    outcome = await run(ledger, store, tool.spec, call, tool.fn, approval_id)
    bound.info(
        "dex tool call done",
        status=str(outcome.status),
        replayed=outcome.replayed,
        attempts=outcome.attempts,
    )
    return ToolCallResult.of(outcome, call.idempotency_key)
