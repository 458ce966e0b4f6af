"""Deciding and using approvals: decide, cancel, expire, consume.

Decisions are signed by the reviewer side and checked by the one policy (`policy`); before a
decision is consumed its stream is read and checked, signatures, MACs and policy, and the row
must be the stream's fold: anything else is refused (`DecisionForged`, `PolicyViolation`).
Inside a caller's transaction a consumer locks the row instead of racing, so the caller's later
statements meet no conflict. Final decisions NOTIFY `signoff_approvals` (after commit).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import asyncpg

from ledger.journal import NewEvent
from ledger.journal.projection import Fact, fold, verify_projection
from ledger.keys.digests import text_digest

from .core import (
    CANCEL_REASON_PART,
    StoreCore,
    _closing,
    _committed,
    _due,
    _reason_part,
    _reviewer,
    _text,
    log,
)
from .errors import (
    ApprovalAlreadyDecided,
    ApprovalExpired,
    ApprovalPending,
    DecisionForged,
    DecisionNotAllowed,
    PolicyViolation,
    UnknownApproval,
)
from .integrity import (
    ProblemKind,
    StreamProblem,
    approval_problems,
    as_facts,
    sign_cancellation,
    sign_review,
)
from .model import (
    Approval,
    ApprovalStatus,
    Decision,
    DecisionKind,
    Review,
    Reviewer,
    check_decision,
    json_object,
)
from .policy import PolicyRule, policy_problem
from .presentation import check_edit
from .projection import APPROVALS, stream_of
from .records import Read

__all__ = ["Decided", "Decisions"]


@dataclass(frozen=True, slots=True)
class Decided:
    """What `Decisions.decide_as_read` came to."""

    approval: Approval  # as the decision left it; as read when it was a retry
    decision: Decision  # the decision made of the approval as read
    replayed: bool  # its request id's decision was recorded before: nothing was written


class Decisions(StoreCore):
    """Decisions on approvals and their single use."""

    async def decide(
        self,
        approval_id: str,
        decision: Decision,
        reviewer: Reviewer | str,
        *,
        request_id: str | None = None,
    ) -> Approval:
        """Record one reviewer's decision. Final once the quorum approves or anyone rejects.

        `request_id`, a client's id for this request (the HTTP service's), is recorded in the
        `approval.decided` event: the same request again (same reviewer, same decision) records
        nothing and returns the approval as it is (`decide_as_read` tells a retry apart).

        `reviewer` is the reviewer's id (normalised: `identity.reviewer_id`), or a `Reviewer`
        without groups. Its groups are read from the reviewer directory with the approval it
        decides, never taken from the caller: a policy's `group:<name>`
        matches only a reviewer the directory puts in that group.

        Raises:
            UnknownApproval, ApprovalAlreadyDecided (also: `request_id` recorded another
            decision), ApprovalExpired (recorded as expired),
            DecisionNotAllowed (policy; a reviewer outside the directory for a policy that
            names groups), InvalidApprovalRequest (malformed decision; an edit that does not
            fit the policy's `args_schema`; a `Reviewer` that carries groups),
            InvalidReviewerId (a refused reviewer id),
            ReviewerKekMissing (this store's ring cannot sign: an agent worker's).
        """
        check_decision(decision)  # before anything is read

        def as_given(_: Approval) -> Decision:
            return decision

        decided = await self.decide_as_read(approval_id, as_given, reviewer, request_id=request_id)
        return decided.approval

    async def decide_as_read(
        self,
        approval_id: str,
        decision_of: Callable[[Approval], Decision],
        reviewer: Reviewer | str,
        *,
        request_id: str | None = None,
    ) -> Decided:
        """`decide` the decision `decision_of` makes of the approval as read, in one read and
        at most one write: the read brings the approval, the reviewer's directory groups, the
        server's clock and what this reviewer recorded before under `request_id` (one
        statement, `_sql.TO_DECIDE`), so neither a retry nor a refusal reads again.

        `decision_of` may raise to refuse the decision (nothing is written); it is called
        again when another step moved the approval on before this one could write. A retry of
        a recorded request writes nothing (`Decided.replayed`); the request id's decision is
        checked before expiry and policy, as it was when it was recorded.

        Raises:
            whatever `decision_of` raises, and as `decide`.
        """
        _text(approval_id, "approval id")
        if request_id is not None:
            _text(request_id, "request id")
        who = _reviewer(reviewer)
        self.ring.require_decision_signer()  # before anything is written, expiry included
        asked: Decision | None = None

        async def step(_: asyncpg.Connection, read: Read) -> list[NewEvent]:
            nonlocal asked
            approval = read.approval
            asked = decision_of(approval)
            payload = self._decision_payload(asked)
            if (earlier := read.request_decision) is not None:  # a retry: answered as it was
                if earlier is not asked.kind:
                    raise ApprovalAlreadyDecided(
                        approval_id, f"request id {request_id!r} was a {earlier}"
                    )
                return []
            if approval.status is ApprovalStatus.PENDING and _due(approval, read.now):
                return [_closing("approval.expired", at=read.now)]
            deciding, policy = who, approval.policy
            listed = read.reviewer_groups is not None  # a policy naming nobody needs it
            if not approval.status.final and policy.names_groups and who.id not in policy.approvers:
                # Where a group could let this reviewer decide: its directory groups.
                deciding = Reviewer(who.id, read.reviewer_groups or frozenset(), listed=listed)
            else:
                deciding = Reviewer(who.id, listed=listed)
            return [self._review(approval, asked, deciding, payload, request_id)]

        async with self.ring.sealing():  # the step seals and signs the decision
            approval, events = await self._advance(
                approval_id, step, reviewer=who.id, request_id=request_id
            )
        if asked is None:  # `_advance` returns only after the step ran
            raise RuntimeError("a decision's step did not run")
        if not events:
            return Decided(approval, asked, replayed=True)
        if events[0].type == "approval.expired":
            raise ApprovalExpired(approval_id)
        log.info(
            "approval decided",
            approval_id=approval_id,
            reviewer=who.id,
            decision=str(asked.kind),
            status=str(approval.status),
        )
        return Decided(approval, asked, replayed=False)

    async def cancel(self, approval_id: str, by: str, *, reason: str | None = None) -> Approval:
        """Withdraw a pending request (it will never run).

        On the reviewer side (a ring that signs decisions) the cancellation is `by`'s, signed
        like a decision. An agent worker's ring cannot sign: it withdraws a request only in the
        name it was requested under (`by` is its `requested_by`), which names no one else.
        A `reason` is sealed like a reject's (`cancel_reason_of` opens it) and the agent that
        waits is told it.

        Raises:
            UnknownApproval, ApprovalAlreadyDecided (it is final already), ReviewerKekMissing
            (a worker cancelling in a name other than the requester's; nothing is written),
            InvalidApprovalRequest (a reason that is not storable text within `MAX_TEXT_BYTES`).
        """
        _text(approval_id, "approval id")
        _text(by, "by")
        if reason is not None:
            check_decision(Decision.reject(reason))  # the same rules as a reject's reason
        signs = self.ring.can_sign_decisions

        async def step(_: asyncpg.Connection, read: Read) -> list[NewEvent]:
            approval = read.approval
            if approval.status.final:
                raise ApprovalAlreadyDecided(approval_id, f"already {approval.status}")
            cancelled = _closing("approval.cancelled", actor=by)
            if reason is not None:
                sealed = self.records.seal(reason, approval_id, CANCEL_REASON_PART)
                cancelled = NewEvent(
                    cancelled.type, {**cancelled.data, "reason_sealed": sealed}, cancelled.actor
                )
            if signs:
                return [sign_cancellation(self.ring, approval.binding, approval_id, cancelled)]
            if by != approval.requested_by:  # a person's cancellation: the reviewer side's
                self.ring.require_decision_signer()
            return [cancelled]

        async with self.ring.sealing():  # the step signs or MACs the cancellation
            approval, _ = await self._advance(approval_id, step)
        return approval

    async def consume(
        self, approval_id: str, task_run_id: str, *, connection: asyncpg.Connection | None = None
    ) -> Approval:
        """Use the final decision, exactly once across all processes; returns the approval with
        its `decision` (edited arguments and answers decrypted). An expired request is consumed
        as a denial. Runs in `connection`'s transaction when given.

        Raises:
            UnknownApproval, ApprovalPending, ApprovalAlreadyDecided (used before),
            DecisionForged / PolicyViolation (its stream does not prove its decision: nothing
            is written, a warning is logged).
        """
        _text(approval_id, "approval id")
        _text(task_run_id, "task_run_id")

        async def step(conn: asyncpg.Connection, read: Read) -> list[NewEvent]:
            approval = read.approval
            await self._proven(conn, approval, read.stream)
            if approval.consumed:
                raise ApprovalAlreadyDecided(
                    approval_id,
                    f"its decision was used already by {approval.consumed_by}",
                    consumed_by=approval.consumed_by,
                )
            events = []
            if approval.status is ApprovalStatus.PENDING:
                if not _due(approval, read.now):
                    raise ApprovalPending(approval_id)
                events.append(_closing("approval.expired", at=read.now))
            at = datetime.now(UTC).isoformat()
            consumed = {"task_run_id": task_run_id, "at": at}
            events.append(NewEvent("approval.consumed", consumed, actor=task_run_id))
            return events

        # The events it appends are MACed: the ring readied for that.
        async with self.ring.sealing():
            if connection is None:
                approval, _ = await self._advance(approval_id, step, stream=True)
            else:  # the caller's transaction: the row locked until it ends, so no step races it
                async with self.db.transaction(connection) as conn:
                    read = await self.records.locked_with_stream(conn, approval_id)
                    if read is None:
                        raise UnknownApproval(approval_id)
                    events = await step(conn, read)
                    approval = _committed(
                        await self.records.commit(conn, approval_id, read.approval, events)
                    )
        log.info("approval consumed", approval_id=approval_id, task_run_id=task_run_id)
        return replace(approval, decision=await self.final_decision(approval))

    async def problems(self, approval_id: str) -> list[StreamProblem]:
        """What is wrong with one approval's stream (`integrity.approval_problems`)."""
        _text(approval_id, "approval id")
        events = await self.journal.read_stream(stream_of(approval_id))
        return await approval_problems(self.ring, events)

    async def verify_projection(self) -> list[str]:
        """Rebuild every approval from its stream and compare with the `approvals` table;
        return the differences (none when the projection is true to the journal)."""
        return await verify_projection(self.db, APPROVALS)

    async def _proven(
        self, conn: asyncpg.Connection, approval: Approval, stream: Sequence[Fact]
    ) -> None:
        """Refuse an approval whose stream does not prove it: a bad or missing MAC or signature,
        a policy its decisions break, a row that is not its stream's fold. Logged.

        `stream` was read with the locked row, in a snapshot from before the lock: when it
        does not prove the row, the stream is read again and only that verdict counts."""
        approval_id = approval.approval_id
        problems = await self._stream_problems(approval, stream) if stream else None
        if problems is None or problems:
            events = await self.journal.read_stream(stream_of(approval_id), connection=conn)
            problems = await self._stream_problems(approval, as_facts(events))
        if not problems:
            return
        first = problems[0]
        log.warning(
            "approval refused: its stream does not prove it",
            approval_id=approval_id,
            version=first.version,
            problem=first.message,
            problems=len(problems),
        )
        error = PolicyViolation if first.kind is ProblemKind.POLICY else DecisionForged
        raise error(approval_id, f"refused: {first.message} (version {first.version})")

    async def _stream_problems(
        self, approval: Approval, stream: Sequence[Fact]
    ) -> list[StreamProblem]:
        problems = await approval_problems(self.ring, stream)
        if not problems and fold(APPROVALS, stream) != approval:
            problems = [
                StreamProblem(
                    approval.approval_id,
                    approval.version,
                    ProblemKind.FORGED,
                    "its row is not its stream",
                )
            ]
        return problems

    def _decision_payload(self, decision: Decision) -> dict[str, Any]:
        check_decision(decision)
        if decision.kind is DecisionKind.EDIT:
            return {"args_text": json_object(decision.args, "edited args")}
        if decision.kind is DecisionKind.RESPOND:
            return {"message": decision.message}
        return {}

    def _review(
        self,
        approval: Approval,
        decision: Decision,
        who: Reviewer,
        payload: dict[str, Any],
        request_id: str | None = None,
    ) -> NewEvent:
        """The `approval.decided` event for a decision the policy allows."""
        approval_id, policy = approval.approval_id, approval.policy
        if approval.status.final:
            raise ApprovalAlreadyDecided(approval_id, f"already {approval.status}")
        at = datetime.now(UTC)  # the time the policy judges is the time signed
        refusal = policy_problem(
            policy,
            decision.kind,
            who,
            earlier_approvers=approval.approvers,
            requested_by=approval.requested_by,
            at=at,
            expires_at=approval.expires_at,
        )
        if refusal is not None:
            hint = ""
            if refusal.rule is PolicyRule.APPROVER and policy.names_groups:
                hint = (
                    " (groups are the reviewer directory's, and it puts this reviewer in none "
                    "of the policy's)"
                )
            raise DecisionNotAllowed(approval_id, f"{refusal.message}{hint}")
        if decision.kind is DecisionKind.EDIT and decision.args is not None:  # it must fit
            check_edit(policy.args_schema, decision.args, approval.tool)
        approvers = set(approval.approvers)
        edited, answer = payload.get("args_text"), payload.get("message")
        review = Review(
            reviewer=who.id,
            decision=decision.kind,
            at=at,
            reason_sealed=None
            if decision.reason is None
            else self.records.seal(
                decision.reason, approval_id, _reason_part(decision.kind, who.id)
            ),
            args_digest=None if edited is None else text_digest(self.ring, edited),
            args_sealed=None
            if edited is None
            else self.records.seal(edited, approval_id, f"edit:{who.id}"),
            message_sealed=None
            if answer is None
            else self.records.seal(answer, approval_id, "respond"),
            groups=tuple(sorted(who.groups)),
        )
        review = sign_review(self.ring, approval.binding, approval_id, review)
        final = decision.kind is not DecisionKind.APPROVE or len(approvers) + 1 >= policy.quorum
        data = review.to_json() | {"final": final}
        if who.groups:  # the directory's groups this decision was allowed by, for auditors
            data["reviewer_groups"] = sorted(who.groups)
        if final:
            deciders = {*approvers, who.id} if decision.kind is DecisionKind.APPROVE else {who.id}
            data["decided_by"] = sorted(deciders)
        if request_id is not None:  # unsigned: it only names the client's request, for retries
            data["request_id"] = request_id
        return NewEvent("approval.decided", data, actor=who.id)
