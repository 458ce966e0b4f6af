"""Inbound: Welt's answers as decisions in the approval store, made by the Slack user.

An answer's meaning comes from the widget it came from, never from what it says: a pressed
button worth `true` approves, any other pressed button rejects (except *Decided elsewhere*, which
decides nothing), and submitted text is the `respond` decision, even when it reads "approve".

Who decided: Welt passes the Slack user it verified as the runtime user id,
`slack:<team>:<user>`; the reviewer is `slack:<user>`. Its groups are the reviewer
directory's (`signoff reviewers add slack:U0123 --group G`), never Welt's or the payload's, so a
policy names `slack:U0123` or a group the directory puts that user in. Welt's resume payload
does not say who pressed each button: it is sent once every question of a stop is answered,
under the identity of the person whose answer completed it. Every answer of one payload is
recorded under that identity.

Every decision goes through the runtime's decide rule (`adapters.runtime.decide_once`, over
`ApprovalStore.decide`, which locks the approval): an approval is decided once, whatever is
delivered twice or in which process. A repeated delivery of the same answer by the same person
is a harmless repeat (`REPEATED`); anything else that meets a decided approval is reported
(`ALREADY_DECIDED`), never recorded.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from adapters.runtime import DecisionConflict, decide_once
from approvals import (
    Approval,
    ApprovalExpired,
    ApprovalStatus,
    ApprovalStore,
    Decision,
    DecisionKind,
    DecisionNotAllowed,
    InvalidApprovalRequest,
    Reviewer,
    UnknownApproval,
    check_decision,
)
from ledger.log import get_logger

from .errors import InvalidWeltPayload, MissingReviewer, UnknownInterrupt
from .render import APPROVE_VALUE, DECIDED_ELSEWHERE
from .wire import WeltAnswer

__all__ = ["AnswerOutcome", "AnswerStatus", "decision_for", "record_answers", "slack_reviewer"]

log = get_logger(__name__)

REJECTED_IN_SLACK = "rejected in Slack"
_SLACK_ID = re.compile(r"[A-Z0-9]{2,}")


def slack_reviewer(user_id: str | None) -> Reviewer:
    """The reviewer for Welt's runtime user id (`slack:<team>:<user>`), a Slack user id
    (`U0123`) or a reviewer id (`slack:U0123`). It carries no groups: a decision reads them
    from the reviewer directory.

    Raises:
        MissingReviewer: no user id (Welt's local mode sends none).
        InvalidWeltPayload: not a Slack user id.
    """
    if user_id is None or (isinstance(user_id, str) and not user_id.strip()):
        raise MissingReviewer()
    if not isinstance(user_id, str):
        raise InvalidWeltPayload("runtimeUserId", f"must be a string, not {type(user_id).__name__}")
    parts = user_id.split(":")
    if len(parts) == 3 and parts[0] == "slack":
        team, user = parts[1], parts[2]
    elif len(parts) == 2 and parts[0] == "slack":
        team, user = None, parts[1]
    elif len(parts) == 1:
        team, user = None, parts[0]
    else:
        team = user = ""
    if not _SLACK_ID.fullmatch(user) or (team is not None and not _SLACK_ID.fullmatch(team)):
        raise InvalidWeltPayload(
            "runtimeUserId",
            f"not a Slack user id: {user_id!r} (expected slack:<team>:<user>, slack:<user> "
            "or <user>)",
        )
    return Reviewer(f"slack:{user}")


def decision_for(answer: WeltAnswer) -> Decision | None:
    """The decision an answer stands for; None for *Decided elsewhere* (no decision)."""
    if answer.source == "input":
        return Decision.respond(str(answer.value))
    if answer.value is APPROVE_VALUE:  # `true` exactly: not 1, not "true"
        return Decision.approve()
    if answer.value == DECIDED_ELSEWHERE:
        return None
    return Decision.reject(REJECTED_IN_SLACK)


class AnswerStatus(StrEnum):
    """What one answer did."""

    DECIDED = "decided"  # recorded now (final, or one approval of a quorum)
    REPEATED = "repeated"  # this person gave this decision already: a repeated delivery
    ALREADY_DECIDED = "already_decided"  # decided otherwise, by someone or elsewhere
    REFUSED = "refused"  # the policy does not let this person give this decision
    EXPIRED = "expired"  # nobody decided in time: denied
    NO_DECISION = "no_decision"  # *Decided elsewhere*: nothing to record


@dataclass(frozen=True)
class AnswerOutcome:
    """One answer's outcome, and the approval as it then is (its thread config says where to
    resume)."""

    approval_id: str
    status: AnswerStatus
    decision: DecisionKind | None
    approval: Approval
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "approval_id": self.approval_id,
            "status": str(self.status),
            "decision": None if self.decision is None else str(self.decision),
            "approval_status": str(self.approval.status),
            "decided_by": list(self.approval.decided_by),
            "detail": self.detail,
        }


async def record_answers(
    store: ApprovalStore, answers: Sequence[WeltAnswer], reviewer: Reviewer
) -> list[AnswerOutcome]:
    """Record each answer as `reviewer`'s decision on the approval its interrupt id names.

    Every id is looked up and every decision checked before anything is recorded, so a
    payload naming an unknown id, or with one malformed answer, records nothing.

    Raises:
        UnknownInterrupt: ids that are no approvals in the store.
        InvalidWeltPayload: an answer is no decision the store could record (e.g. text too
            long); `where` names it.
    """
    for answer in answers:
        decision = decision_for(answer)
        if decision is None:
            continue
        try:
            check_decision(decision)
        except InvalidApprovalRequest as e:
            raise InvalidWeltPayload(f"interrupt_responses[{answer.interrupt_id!r}]", str(e)) from e
    approvals: dict[str, Approval] = {}
    unknown: list[str] = []
    for answer in answers:
        try:
            approvals[answer.interrupt_id] = await store.get(answer.interrupt_id)
        except UnknownApproval:
            unknown.append(answer.interrupt_id)
    if unknown:
        log.warning("welt answers to unknown interrupt ids", count=len(unknown))
        raise UnknownInterrupt(unknown)
    return [await _record(store, a, approvals[a.interrupt_id], reviewer) for a in answers]


async def _record(
    store: ApprovalStore, answer: WeltAnswer, approval: Approval, reviewer: Reviewer
) -> AnswerOutcome:
    approval_id = approval.approval_id
    decision = decision_for(answer)
    if decision is None:
        log.info("welt answer decides nothing", approval_id=approval_id, reviewer=reviewer.id)
        return AnswerOutcome(approval_id, AnswerStatus.NO_DECISION, None, approval)
    kind = decision.kind
    try:
        recorded = await decide_once(store, approval_id, decision, reviewer)
    except (DecisionConflict, DecisionNotAllowed, ApprovalExpired) as e:
        current = await store.get(approval_id)
        status = _not_recorded(e, current)
        log.info(
            "welt answer not recorded",
            approval_id=approval_id,
            reviewer=reviewer.id,
            decision=str(kind),
            outcome=str(status),
        )
        return AnswerOutcome(approval_id, status, kind, current, str(e))
    if recorded.duplicate:
        log.info("welt answer repeated", approval_id=approval_id, reviewer=reviewer.id)
        return AnswerOutcome(approval_id, AnswerStatus.REPEATED, kind, recorded.approval)
    decided = recorded.approval
    log.info(
        "welt answer recorded",
        approval_id=approval_id,
        reviewer=reviewer.id,
        decision=str(kind),
        status=str(decided.status),
    )
    return AnswerOutcome(approval_id, AnswerStatus.DECIDED, kind, decided)


def _not_recorded(error: Exception, current: Approval) -> AnswerStatus:
    if isinstance(error, ApprovalExpired) or current.status is ApprovalStatus.EXPIRED:
        return AnswerStatus.EXPIRED
    if isinstance(error, DecisionConflict):
        return AnswerStatus.ALREADY_DECIDED
    return AnswerStatus.REFUSED
