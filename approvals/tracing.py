"""Approvals in traces (`ledger.telemetry`): a span while a process waits for a decision, one
while a call consumes it (a child of the call's `execute_tool` span), and how long the approval
waited for its decision, observed once the call that consumed it is recorded
(`ledger.calls.tracing.approval_waited`): every approval a call uses is consumed exactly once,
whichever way its adapter waited (a LangGraph interrupt waits in no process), and a consumption
whose transaction rolls back is not observed."""

from __future__ import annotations

from typing import Final

from opentelemetry.trace import Span

from ledger.calls.tracing import approval_waited
from ledger.telemetry import Attr

from .model import Approval, ApprovalPolicy

__all__ = ["CONSUME_SPAN", "WAIT_SPAN", "consumed", "tier_label", "waited"]

WAIT_SPAN: Final = "signoff.approval.wait"
CONSUME_SPAN: Final = "signoff.approval.consume"


def waited(current: Span, approval: Approval) -> None:
    """End a wait's span with the approval as the wait left it (still pending: nobody decided
    in time)."""
    if current.is_recording():
        current.set_attributes(_described(approval))


def tier_label(policy: ApprovalPolicy) -> str:
    """The policy's tier (`self_confirm`, `four_eyes`), or `quorum` when it needs more than one
    approving reviewer: how metrics label an approval's tier."""
    return "quorum" if policy.quorum > 1 else str(policy.tier)


def consumed(current: Span, approval: Approval) -> None:
    """A call consumed `approval` (in its intent's transaction): describe the span, and keep
    its wait for the call's outcome to observe."""
    if approval.decided_at is not None:
        seconds = (approval.decided_at - approval.requested_at).total_seconds()
        approval_waited(max(seconds, 0.0), tier_label(approval.policy))
    if current.is_recording():
        current.set_attributes(_described(approval))


def _described(approval: Approval) -> dict[str, str]:
    return {
        Attr.APPROVAL_STATUS: str(approval.status),
        Attr.APPROVAL_TIER: tier_label(approval.policy),
        Attr.TOOL_NAME: approval.tool,
        Attr.RUN_ID: approval.run_id,
    }
