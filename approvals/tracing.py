"""Approvals in traces (`ledger.telemetry`): a span while a process waits for a decision, one
while a call consumes it (a child of the call's `execute_tool` span), and how long the approval
waited for its decision, observed when it is consumed: every approval a call uses is consumed
exactly once, whichever way its adapter waited (a LangGraph interrupt waits in no process)."""

from __future__ import annotations

from typing import Final

from opentelemetry.trace import Span

from ledger.telemetry import Attr, approval_wait

from .model import Approval

__all__ = ["CONSUME_SPAN", "WAIT_SPAN", "consumed", "waited"]

WAIT_SPAN: Final = "signoff.approval.wait"
CONSUME_SPAN: Final = "signoff.approval.consume"


def waited(current: Span, approval: Approval) -> None:
    """End a wait's span with the approval as the wait left it (still pending: nobody decided
    in time)."""
    if current.is_recording():
        current.set_attributes(_described(approval))


def consumed(current: Span, approval: Approval) -> None:
    """A call consumed `approval`: describe the span and observe its wait."""
    if approval.decided_at is not None:
        seconds = (approval.decided_at - approval.requested_at).total_seconds()
        approval_wait.record(
            max(seconds, 0.0),
            {Attr.APPROVAL_TIER: str(approval.tier), Attr.TOOL_NAME: approval.tool},
        )
    if current.is_recording():
        current.set_attributes(_described(approval))


def _described(approval: Approval) -> dict[str, str]:
    return {
        Attr.APPROVAL_STATUS: str(approval.status),
        Attr.APPROVAL_TIER: str(approval.tier),
        Attr.TOOL_NAME: approval.tool,
        Attr.RUN_ID: approval.run_id,
    }
