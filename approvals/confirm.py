"""Self-confirmation: the person at the agent decides an approval of the self-confirm tier
through the framework's own resume (LangChain's human-in-the-loop model).

No reviewer signs it, and nobody's name is claimed for it: the decision is recorded as
self-confirmed by this process (`SelfConfirmation`: the database login the session holds, read
from the database, the host and the pid), MACed like every event a worker writes. The database
takes it only for an approval whose stored policy is the self-confirm tier and only with the
session's own login (`signoff_commit_approval`); the consumer and `ledger verify` apply the
same policy (`policy.policy_problem`).
"""

from __future__ import annotations

import os
import socket
from datetime import UTC, datetime

import asyncpg

from ledger.journal import NewEvent
from ledger.keys.digests import text_digest

from .core import StoreCore, _closing, _due, _reason_part, _text, log
from .errors import ApprovalAlreadyDecided, ApprovalExpired, DecisionNotAllowed
from .model import (
    Approval,
    ApprovalStatus,
    Decision,
    DecisionKind,
    Review,
    SelfConfirmation,
    check_decision,
    json_object,
)
from .policy import policy_problem
from .presentation import check_edit
from .records import Read

__all__ = ["SelfConfirmations"]


class SelfConfirmations(StoreCore):
    """Decisions confirmed at the agent, for approvals of the self-confirm tier."""

    async def self_confirm(self, approval_id: str, decision: Decision) -> Approval:
        """Record `decision` as confirmed by this process (no reviewer KEK needed). Final.

        Raises:
            UnknownApproval, ApprovalAlreadyDecided, ApprovalExpired (recorded as expired),
            DecisionNotAllowed (a four-eyes approval, a decision its policy does not allow),
            InvalidApprovalRequest (malformed decision; an edit that does not fit the policy's
                `args_schema`).
        """
        _text(approval_id, "approval id")
        check_decision(decision)
        edited = None
        if decision.kind is DecisionKind.EDIT:
            edited = json_object(decision.args, "edited args")

        async def step(conn: asyncpg.Connection, read: Read) -> list[NewEvent]:
            approval = read.approval
            if approval.status is ApprovalStatus.PENDING and _due(approval):
                return [_closing("approval.expired")]
            if approval.status.final:
                raise ApprovalAlreadyDecided(approval_id, f"already {approval.status}")
            login = await conn.fetchval("SELECT session_user::text")
            who = SelfConfirmation(str(login), socket.gethostname(), os.getpid())
            return [self._confirmed(approval, decision, who, edited)]

        async with self.ring.sealing():  # the step seals; the commit MACs
            approval, events = await self._advance(approval_id, step)
        if events[0].type == "approval.expired":
            raise ApprovalExpired(approval_id)
        log.info(
            "approval self-confirmed",
            approval_id=approval_id,
            decision=str(decision.kind),
            status=str(approval.status),
        )
        return approval

    def _confirmed(
        self, approval: Approval, decision: Decision, who: SelfConfirmation, edited: str | None
    ) -> NewEvent:
        """The `approval.decided` event of a self-confirmation the policy allows."""
        approval_id, name = approval.approval_id, who.name
        at = datetime.now(UTC)
        refusal = policy_problem(
            approval.policy,
            decision.kind,
            who,
            earlier_approvers=approval.approvers,
            requested_by=approval.requested_by,
            at=at,
            expires_at=approval.expires_at,
        )
        if refusal is not None:
            raise DecisionNotAllowed(approval_id, refusal.message)
        if edited is not None:  # an edit must fit the tool, or nothing is recorded
            check_edit(approval.policy.args_schema, decision.args or {}, approval.tool)
        seal = self.records.seal
        review = Review(
            reviewer=name,
            decision=decision.kind,
            at=at,
            reason_sealed=None
            if decision.reason is None
            else seal(decision.reason, approval_id, _reason_part(decision.kind, name)),
            args_digest=None if edited is None else text_digest(self.ring, edited),
            args_sealed=None if edited is None else seal(edited, approval_id, f"edit:{name}"),
            message_sealed=None
            if decision.message is None or decision.kind is not DecisionKind.RESPOND
            else seal(decision.message, approval_id, "respond"),
            self_confirmed=who.to_json(),
        )
        data = review.to_json() | {"final": True, "decided_by": [name]}
        return NewEvent("approval.decided", data, actor=name)
