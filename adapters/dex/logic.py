"""What each Step and the decide RPC do, as plain async functions over the approval store and
the tool-call ledger. The Dex wiring in `flow.py` only calls these and turns their answers into
Waits, movements and channel messages, so everything here runs (and is tested) without a Dex
server.

- `await_approval`: record the request in the store (the same request again returns the same
  approval) and say whether the call may go on (a final decision, or expired) or how long the
  Step should wait for the decision or the expiry.
- `record_decision` / `decide_for_flow`: record a decision in the store. Dex gives every RPC
  call a fresh request id, so repeated delivery is recognised by the approval's state: the same
  decision again is a success that writes nothing, a different one is `DecisionConflict`.
- `call_tool`: run the call through `ToolLedger.execute`, consuming the approval in the
  intent's transaction; the ledger replays a finished call and turns a write whose worker died
  into `outcome_unknown`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from approvals import (
    Approval,
    ApprovalAlreadyDecided,
    ApprovalPending,
    ApprovalPolicy,
    ApprovalStatus,
    ApprovalStore,
    Decision,
    DecisionKind,
    DecisionNotAllowed,
    Reviewer,
    approval_gate,
)
from approvals.model import is_expired
from ledger.calls.model import CallContext, Effect, ToolCall, ToolFailed, ToolPolicy
from ledger.calls.service import ToolFunction, ToolLedger
from ledger.canonical import json_digest
from ledger.log import get_logger

from .errors import ApprovalNotForThisCall, DecisionConflict, RuntimeNotBound
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
    """A tool the Flow may run, and how Signoff treats it.

    Attributes:
        fn: `async fn(args, context)`; `context.idempotency_key` is
            `<flowId>/<turnId>/<toolCallId>`, the same on every attempt.
        effect: read and idempotent_write run up to three attempts, anything else once; a
            write whose outcome is not recorded becomes `outcome_unknown`.
        approval: the approval policy; None runs the tool without asking.
        once_per_run: at most once per Flow, whatever the call id.
    """

    name: str
    fn: ToolFunction
    effect: Effect = Effect.SINGLE_ATTEMPT
    approval: ApprovalPolicy | None = None
    once_per_run: bool = False

    @property
    def policy(self) -> ToolPolicy:
        return ToolPolicy(self.effect, self.once_per_run)


def _no_such_tool(name: str) -> DexTool:
    async def refuse(args: dict[str, Any], context: CallContext) -> None:
        raise ToolFailed(f"the agent has no tool named {name!r}")

    return DexTool(name, refuse, Effect.READ)


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


def task_run_id(flow_id: str, call_id: str) -> str:
    """Who consumes the approval of a call: `<flowId>/<toolCallId>`."""
    return f"{flow_id}/{call_id}"


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


async def _request(
    store: ApprovalStore, flow_id: str, request: ToolCallRequest, policy: ApprovalPolicy
) -> Approval:
    return await store.request(
        run_id=flow_id,
        tool=request.tool,
        args=request.args,
        call_id=request.call_id,
        requested_by=request.requested_by,
        policy=policy,
    )


async def await_approval(
    store: ApprovalStore,
    flow_id: str,
    request: ToolCallRequest,
    policy: ApprovalPolicy,
    *,
    now: datetime | None = None,
) -> ApprovalWait:
    """Record the approval request of a call (once: the same request returns the same
    approval) and say whether to go on or how long to wait."""
    approval = await _request(store, flow_id, request, policy)
    now = now or datetime.now(UTC)
    expired = approval.status is ApprovalStatus.PENDING and is_expired(approval.expires_at, now)
    timer = None
    if approval.expires_at is not None:
        remaining = (approval.expires_at - now).total_seconds()
        timer = timedelta(seconds=max(1, math.ceil(remaining)))
    return ApprovalWait(
        approval_id=approval.approval_id,
        status=approval.status,
        ready=approval.status.final or expired,
        timer=timer,
        channel_key=channel_key(request.call_id),
    )


# -- decisions ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class DecisionRecord:
    """A decision in the store; `duplicate` when it was there already (nothing written)."""

    approval: Approval
    duplicate: bool


def _same_decision(recorded: Decision, attempted: Decision) -> bool:
    if recorded.kind is not attempted.kind:
        return False
    if attempted.kind is DecisionKind.EDIT:
        return (
            recorded.args is not None
            and attempted.args is not None
            and (json_digest(recorded.args) == json_digest(attempted.args))
        )
    if attempted.kind is DecisionKind.RESPOND:
        return recorded.message == attempted.message
    if attempted.kind is DecisionKind.REJECT:
        return recorded.reason == attempted.reason
    return True


async def record_decision(
    store: ApprovalStore, approval_id: str, decision: Decision, reviewer: Reviewer | str
) -> DecisionRecord:
    """Record `decision` unless the approval holds it already.

    Raises:
        DecisionConflict: the approval holds another decision, expired or was cancelled.
        UnknownApproval, ApprovalExpired, DecisionNotAllowed, InvalidApprovalRequest: as
            `ApprovalStore.decide`.
    """
    who = Reviewer(reviewer) if isinstance(reviewer, str) else reviewer
    bound = log.bind(approval_id=approval_id, reviewer=who.id)
    try:
        return DecisionRecord(await store.decide(approval_id, decision, who), duplicate=False)
    except ApprovalAlreadyDecided:
        approval = await store.get(approval_id, reveal=True)
        if approval.status in (ApprovalStatus.EXPIRED, ApprovalStatus.CANCELLED):
            raise DecisionConflict(approval_id, approval.status, decision.kind) from None
        if approval.decision is None or not _same_decision(approval.decision, decision):
            raise DecisionConflict(approval_id, approval.status, decision.kind) from None
    except DecisionNotAllowed:
        # The same reviewer's approval delivered again while a quorum is still open.
        approval = await store.get(approval_id)
        approved_before = who.id in approval.approvers
        if decision.kind is not DecisionKind.APPROVE or not approved_before:
            raise
    bound.info("decision delivered again; already recorded", status=str(approval.status))
    return DecisionRecord(approval, duplicate=True)


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
    call = ToolCall(flow_id, request.call_id, request.tool, request.args, turn_id=request.turn_id)
    bound = log.bind(run_id=flow_id, call_id=request.call_id, tool=request.tool)
    gate = None
    if tool.approval is not None:
        approval = await _request(store, flow_id, request, tool.approval)
        if approval.status is ApprovalStatus.PENDING and not is_expired(
            approval.expires_at, datetime.now(UTC)
        ):
            raise ApprovalPending(approval.approval_id)
        run = task_run_id(flow_id, request.call_id)
        gate = approval_gate(store, approval.approval_id, run, request.args)
        bound = bound.bind(approval_id=approval.approval_id)
    outcome = await ledger.execute(call, tool.fn, tool.policy, gate=gate)
    bound.info(
        "dex tool call done",
        status=str(outcome.status),
        replayed=outcome.replayed,
        attempts=outcome.attempts,
    )
    return ToolCallResult.of(outcome, call.idempotency_key)
