"""The one decide rule of every adapter: a decision delivered again is a duplicate that
records nothing; a different one is `DecisionConflict`.

Deliveries repeat (Dex gives every RPC call a fresh request id, Welt resends a payload,
LangGraph replays a node's resume value), so "again" is read from the approval itself: the
same reviewer gave the same kind of decision with the same payload (reason, edited
arguments, answer). Anything else that meets a decided, expired or cancelled approval is a
conflict; the recorded decision stands.
"""

from __future__ import annotations

from dataclasses import dataclass

from approvals import (
    Approval,
    ApprovalAlreadyDecided,
    ApprovalStatus,
    ApprovalStore,
    Decision,
    DecisionKind,
    DecisionNotAllowed,
    Reviewer,
)
from approvals.errors import ApprovalError
from ledger.canonical import canonical_json
from ledger.keys.digests import matches
from ledger.log import get_logger

__all__ = ["DecisionConflict", "DecisionRecord", "confirm_once", "decide_once", "same_decision"]

log = get_logger(__name__)


class DecisionConflict(ApprovalError):
    """A decision arrived for an approval that already holds a different one (or that expired
    or was cancelled). The recorded decision stands; nothing was written.

    Attributes:
        recorded: the approval's status (`approved`, `rejected`, `expired`, ...).
        attempted: the kind of the decision that was refused.
    """

    def __init__(self, approval_id: str, recorded: str, attempted: str) -> None:
        super().__init__(
            approval_id,
            f"already {recorded}; a different decision ({attempted}) cannot replace it",
        )
        self.recorded = recorded
        self.attempted = attempted


@dataclass(frozen=True)
class DecisionRecord:
    """A decision in the store; `duplicate` when it was there already (nothing written)."""

    approval: Approval
    duplicate: bool


async def same_decision(
    store: ApprovalStore, approval: Approval, decision: Decision, reviewer_id: str
) -> bool:
    """Whether `reviewer_id` gave `decision` on `approval` already: same kind, same reason
    (sealed: compared opened), same edited arguments (by digest, under the key it names), same
    answer."""
    for review in approval.reviews:
        if review.reviewer != reviewer_id or review.decision is not decision.kind:
            continue
        if await store.reason_of(approval, review) != decision.reason:
            continue
        if decision.kind is DecisionKind.EDIT:
            return (
                decision.args is not None
                and review.args_digest is not None
                and await matches(store.ring, review.args_digest, canonical_json(decision.args))
            )
        if decision.kind is DecisionKind.RESPOND:
            # An answer is sealed and always the final review: compare it decrypted.
            if approval.status is not ApprovalStatus.RESPONDED or review != approval.reviews[-1]:
                return False
            return (await store.final_decision(approval)).message == decision.message
        return True
    return False


async def decide_once(
    store: ApprovalStore, approval_id: str, decision: Decision, reviewer: Reviewer | str
) -> DecisionRecord:
    """Record `decision` unless `reviewer` gave it already.

    Raises:
        DecisionConflict: the approval holds another decision, expired or was cancelled.
        DecisionNotAllowed: the policy refuses this reviewer or decision (and it is no repeat
            of this reviewer's vote in an open quorum).
        UnknownApproval, ApprovalExpired, InvalidApprovalRequest: as `ApprovalStore.decide`.
    """
    who = Reviewer(reviewer) if isinstance(reviewer, str) else reviewer
    try:
        return DecisionRecord(await store.decide(approval_id, decision, who), duplicate=False)
    except ApprovalAlreadyDecided:
        approval = await store.get(approval_id)
        closed = approval.status in (ApprovalStatus.EXPIRED, ApprovalStatus.CANCELLED)
        if closed or not await same_decision(store, approval, decision, who.id):
            raise DecisionConflict(approval_id, approval.status, decision.kind) from None
    except DecisionNotAllowed:
        # The same reviewer's vote delivered again while a quorum is still open.
        approval = await store.get(approval_id)
        if not await same_decision(store, approval, decision, who.id):
            raise
    log.info(
        "decision delivered again; already recorded",
        approval_id=approval_id,
        reviewer=who.id,
        status=str(approval.status),
    )
    return DecisionRecord(approval, duplicate=True)


async def confirm_once(
    store: ApprovalStore, approval_id: str, decision: Decision
) -> DecisionRecord:
    """Record `decision` as self-confirmed by this process (`ApprovalStore.self_confirm`: the
    self-confirm tier) unless a self-confirmation by the same login gave it already (a
    resume value replayed, in this process or another).

    Raises:
        DecisionConflict: the approval holds another decision, expired or was cancelled.
        DecisionNotAllowed: a four-eyes approval, or a decision its policy does not allow.
        UnknownApproval, ApprovalExpired, InvalidApprovalRequest: as `self_confirm`.
    """
    try:
        return DecisionRecord(await store.self_confirm(approval_id, decision), duplicate=False)
    except ApprovalAlreadyDecided:
        approval = await store.get(approval_id)
    last = approval.reviews[-1] if approval.reviews else None
    mine = (
        last is not None
        and last.confirmation is not None
        and approval.status not in (ApprovalStatus.EXPIRED, ApprovalStatus.CANCELLED)
        and await same_decision(store, approval, decision, last.reviewer)
    )
    if not mine:
        raise DecisionConflict(approval_id, approval.status, decision.kind)
    log.info("self-confirmation delivered again; already recorded", approval_id=approval_id)
    return DecisionRecord(approval, duplicate=True)
