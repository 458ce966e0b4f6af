"""One tool call through Signoff: ask for its approval, wait until it is final, then run it
through `ToolLedger.execute`, which consumes the approval in the intent's transaction.

The steps are separate functions because adapters wait differently: LangGraph pauses the
graph with `interrupt()`, Dex waits in a Step on a channel or timer, a service may block in
`await_final`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from approvals import (
    Approval,
    ApprovalPending,
    ApprovalPolicy,
    ApprovalStatus,
    ApprovalStore,
    DecisionKind,
    RequestContext,
    approval_gate,
)
from approvals.model import is_expired
from approvals.policies import Mode, Outcome, Verdict
from ledger.calls.model import CallOutcome, GateDeny, ToolCall
from ledger.calls.service import Gate, ToolFunction, ToolLedger
from ledger.errors import HistoryMoved

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
    verdict: Verdict | None = None,
) -> Approval:
    """Request the approval of `call` under `spec.approval`, with what led to it (`context`,
    sealed) and the policy verdict that asked for it (its stamp is recorded in the request);
    the same request (run, call id, arguments) returns the same approval.

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
        policy_stamp=None if verdict is None or verdict.stamp is None else verdict.stamp.to_json(),
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
    *,
    verdict: Verdict | None = None,
    judge_again: Callable[[ToolCall], Awaitable[Verdict]] | None = None,
) -> CallOutcome:
    """Run `call` through the ledger under `spec`: replayed when finished, run at most as
    often as its effect allows, consuming `approval_id` (if given) in the intent's transaction
    as `<run>/<call id>`.

    `verdict` is the policy's (`policy.judge`): a denial is recorded as the call's outcome
    (nothing runs, the approval is not used); an allow runs the call, consuming its approval
    when one was asked and is final (a reviewer's reject, edit or answer still stands) and not
    waiting for one still pending; its stamp is recorded in the intent. `judge_again(call)`
    judges a call again with the same point and principal: the arguments a reviewer's edit
    runs with (a set that forbids them denies the call; one that needs another approval for
    them too), and the call when the verdict counted the run's calls and others started since
    (`HistoryMoved`).

    Raises:
        ApprovalPending: the approval has no final decision and has not expired.
        ApprovalAlreadyDecided: another call used the approval.
        InvalidToolCall: malformed call, or the call id reused with other arguments.
        HistoryMoved: the run kept moving while the call was judged again for
            `REJUDGE_SECONDS`.
    """
    if verdict is not None and approval_id is not None and _looks_at_approval(verdict):
        approval = await store.get(approval_id)
        if verdict.outcome is Outcome.ALLOW and not ready(approval):
            approval_id = None  # allowed outright now: the pending request is not waited for
        else:
            verdict = await _edit_judged(store, call, approval, verdict, judge_again)
    deadline = datetime.now(UTC) + timedelta(seconds=REJUDGE_SECONDS)
    while True:
        gate = _gate(store, call, approval_id, verdict)
        judgment = None if verdict is None else verdict.judgment
        try:
            return await ledger.execute(
                call, fn, spec.ledger_policy(), gate=gate, judgment=judgment
            )
        except HistoryMoved:
            if judge_again is None or datetime.now(UTC) > deadline:
                raise
            verdict = await judge_again(call)


REJUDGE_SECONDS = 30.0
"""How long a call whose run keeps moving is judged again before `HistoryMoved` is raised:
each round lets at least one of the run's racing calls through."""


def _looks_at_approval(verdict: Verdict) -> bool:
    """Whether running under `verdict` needs the approval read first: an allow (is it final?),
    or an enforced set's approval (was it an edit, whose arguments the set must judge?)."""
    if verdict.outcome is Outcome.ALLOW:
        return True
    stamp = verdict.stamp
    return verdict.outcome is Outcome.APPROVAL and stamp is not None and stamp.mode is Mode.ENFORCE


async def _edit_judged(
    store: ApprovalStore,
    call: ToolCall,
    approval: Approval,
    verdict: Verdict,
    judge_again: Callable[[ToolCall], Awaitable[Verdict]] | None,
) -> Verdict:
    """`verdict`, or, when the approval's decision is a reviewer's edit under an enforced set,
    the verdict on the edited arguments: the policy judged the model's (denied when there is
    nothing to judge them with)."""
    stamp = verdict.stamp
    if stamp is None or stamp.mode is not Mode.ENFORCE:
        return verdict
    if approval.status is not ApprovalStatus.EDITED:
        return verdict
    decision = await store.final_decision(approval)  # the edited arguments, opened
    if decision.kind is not DecisionKind.EDIT or decision.args is None:
        return verdict
    if judge_again is None:
        return _denied(verdict, "the edited arguments cannot be judged by the policy here")
    edited = await judge_again(replace(call, args=dict(decision.args)))
    if edited.outcome is Outcome.DENY:
        return _denied(edited, f"the edited arguments are refused: {edited.reason}")
    if edited.outcome is Outcome.APPROVAL and not _same_approval(edited, approval.policy):
        return _denied(edited, "the edited arguments need another approval than this one")
    return replace(edited, outcome=Outcome.APPROVAL, approval=approval.policy)


def _same_approval(verdict: Verdict, policy: ApprovalPolicy) -> bool:
    asked = verdict.approval
    return asked is not None and (
        asked.approvers,
        asked.any_reviewer,
        asked.quorum,
        asked.allowed,
    ) == (policy.approvers, policy.any_reviewer, policy.quorum, policy.allowed)


def _denied(verdict: Verdict, reason: str) -> Verdict:
    stamp = verdict.stamp
    if stamp is not None:
        stamp = replace(stamp, outcome=Outcome.DENY, reason=reason)
    return Verdict(Outcome.DENY, None, reason, stamp, verdict.seen)


def _gate(
    store: ApprovalStore, call: ToolCall, approval_id: str | None, verdict: Verdict | None
) -> Gate | None:
    if verdict is not None and verdict.outcome is Outcome.DENY:
        return _denial(verdict.reason)
    if verdict is not None and verdict.outcome is Outcome.ALLOW and approval_id is None:
        return None
    if verdict is not None and verdict.outcome is Outcome.APPROVAL and approval_id is None:
        return _denial("the policy requires an approval this call was not asked for")
    if approval_id is None:
        return None
    consumer = task_run_id(call.run_id, call.call_id)
    return approval_gate(store, approval_id, consumer, call.args)


def _denial(reason: str) -> Gate:
    async def gate(conn: object) -> GateDeny:  # records the denial; reads nothing
        return GateDeny(reason)

    return gate
