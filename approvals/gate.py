"""The approval gate of the tool-call ledger: consume a decision inside the call's intent.

`ToolLedger.execute(call, fn, policy, gate=approval_gate(store, approval_id, task_run_id, args))`
records the intent and consumes the approval in one transaction, so a decision is used by
exactly one run of the tool, or by none if recording the intent fails.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from ledger.calls.model import GateDeny, GateRespond, GateRun
from ledger.calls.service import Gate
from ledger.canonical import canonical_json
from ledger.errors import ClaimRaced
from ledger.keys.digests import matches
from ledger.telemetry import Attr, span

from .errors import ApprovalAlreadyDecided, DecisionForged
from .model import Approval, DecisionKind
from .projection import stream_of
from .store import ApprovalStore
from .tracing import CONSUME_SPAN, consumed

__all__ = ["approval_gate", "gate_result"]


def gate_result(approval: Approval, args: dict[str, Any]) -> GateRun | GateDeny | GateRespond:
    """What a consumed approval tells the ledger to do with a call requested with `args`."""
    decision = approval.decision
    approval_id, stream = approval.approval_id, stream_of(approval.approval_id)
    if decision is None:
        raise ValueError(f"approval {approval_id} carries no decision")
    # The call's own stream records who allowed it, so audit needs no approvals table.
    if decision.kind is DecisionKind.APPROVE:
        return GateRun(dict(args), approval_id, stream, approval.approved_by)
    if decision.kind is DecisionKind.EDIT and decision.args is not None:
        return GateRun(decision.args, approval_id, stream, approval.approved_by)
    if decision.kind is DecisionKind.RESPOND and decision.message is not None:
        return GateRespond(decision.message, approval_id, stream)
    reason = decision.reason or "the reviewer rejected this call"
    return GateDeny(reason, approval_id, stream)


def approval_gate(
    store: ApprovalStore, approval_id: str, task_run_id: str, args: dict[str, Any]
) -> Gate:
    """A gate that consumes `approval_id` in the intent's transaction."""

    async def gate(conn: asyncpg.Connection) -> GateRun | GateDeny | GateRespond:
        with span(CONSUME_SPAN, {Attr.APPROVAL_ID: approval_id}) as current:
            try:
                approval = await store.consume(approval_id, task_run_id, connection=conn)
            except ApprovalAlreadyDecided as e:
                if e.consumed_by == task_run_id:
                    # This call's intent was recorded by another process a moment ago, with
                    # this approval: look again, and replay or wait for that run.
                    raise ClaimRaced(f"approval {approval_id} was consumed by this call") from e
                raise
            # The binding covers the asked arguments.
            if not await matches(store.ring, approval.args_digest, canonical_json(args)):
                raise DecisionForged(approval_id, "it is for other arguments than this call's")
            consumed(current, approval)
            return gate_result(approval, args)

    return gate
