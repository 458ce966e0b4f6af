"""One tool call through Signoff: ask for its approval, wait until it is final, then run it
through `ToolLedger.execute`, which consumes the approval in the intent's transaction.

The steps are separate functions because adapters wait differently: LangGraph pauses the
graph with `interrupt()`, Dex waits in a Step on a channel or timer, a service may block in
`await_final`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from approvals import (
    Approval,
    ApprovalPending,
    ApprovalStatus,
    ApprovalStore,
    RequestContext,
    approval_gate,
)
from approvals.model import is_expired
from ledger.calls.model import CallOutcome, ToolCall
from ledger.calls.service import ToolFunction, ToolLedger

from .spec import ToolSpec, task_run_id

__all__ = ["ask", "await_final", "ready", "require_ready", "run"]


async def ask(
    store: ApprovalStore,
    spec: ToolSpec,
    call: ToolCall,
    requested_by: str,
    *,
    thread_id: str | None = None,
    thread_config: dict[str, Any] | None = None,
    context: RequestContext | None = None,
) -> Approval:
    """Request the approval of `call` under `spec.approval`, with what led to it (`context`,
    sealed); the same request (run, call id, arguments) returns the same approval.

    Raises:
        ValueError: the spec asks for no approval.
        InvalidApprovalRequest: as `ApprovalStore.request`.
    """
    if spec.approval is None:
        raise ValueError(f"the tool {spec.name!r} needs no approval")
    return await store.request(
        run_id=call.run_id,
        tool=call.tool,
        args=call.args,
        call_id=call.call_id,
        requested_by=requested_by,
        policy=spec.approval,
        thread_id=thread_id,
        thread_config=thread_config,
        context=context,
    )


def ready(approval: Approval, now: datetime | None = None) -> bool:
    """Whether the call may go on: a final decision, or a request whose time is up (the
    call will be denied)."""
    if approval.status.final:
        return True
    return approval.status is ApprovalStatus.PENDING and is_expired(
        approval.expires_at, now or datetime.now(UTC)
    )


def require_ready(approval: Approval) -> None:
    """Raises:
    ApprovalPending: the approval is neither decided nor expired."""
    if not ready(approval):
        raise ApprovalPending(approval.approval_id)


async def await_final(store: ApprovalStore, approval_id: str, seconds: float) -> Approval:
    """Wait up to `seconds` for a final decision (or the expiry); the approval as it
    then is (still pending when nobody decided in time)."""
    return await store.wait(approval_id, seconds)


async def run(
    ledger: ToolLedger,
    store: ApprovalStore,
    spec: ToolSpec,
    call: ToolCall,
    fn: ToolFunction,
    approval_id: str | None = None,
) -> CallOutcome:
    """Run `call` through the ledger under `spec`: replayed when finished, run at most as
    often as its effect allows, consuming `approval_id` (if given) in the intent's transaction
    as `<run>/<call id>`.

    Raises:
        ApprovalPending: the approval has no final decision and has not expired.
        ApprovalAlreadyDecided: another call used the approval.
        InvalidToolCall: malformed call, or the call id reused with other arguments.
    """
    gate = None
    if approval_id is not None:
        consumer = task_run_id(call.run_id, call.call_id)
        gate = approval_gate(store, approval_id, consumer, call.args)
    return await ledger.execute(call, fn, spec.ledger_policy(), gate=gate)
