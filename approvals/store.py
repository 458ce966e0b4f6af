"""The approval store: approvals as events in the journal, decided in any process, used once.

Every change appends to the stream `approval:<id>` and writes the `approvals` projection row in
the same statement (`ledger.journal.projection.commit`). Decisions and grants are signed by the
reviewer side (a ring with the reviewer KEK); every other event is MACed (`integrity`). Before
a decision is consumed its stream is read and checked, signatures, MACs and policy, and the row
must be the stream's fold: anything else is refused (`DecisionForged`, `PolicyViolation`).

A step on an approval (decide, cancel, expire, consume) reads it and commits its events fenced
at the version it read: one read and one write, no lock and no transaction around them. When
another step committed in between (a second reviewer, a racing consumer), nothing is written and
the step reads again, so concurrent reviewers take turns and the second consumer finds the
decision used. Inside a caller's transaction a consumer locks the row instead, so the caller's
later statements meet no conflict. Final decisions NOTIFY `signoff_approvals` (after commit),
new requests `signoff_approval_requests` (reviewers' feeds); waiters also re-check on a timer.
"""

from __future__ import annotations

import hmac
import json
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import asyncpg

from ledger.canonical import canonical_json, jcs_json
from ledger.errors import DatabaseUnavailable, VersionConflict
from ledger.journal import Journal, NewEvent
from ledger.journal.projection import Fact, fold, verify_projection
from ledger.keys import KeyRing
from ledger.keys.attest import sign_statement, statement_ok
from ledger.keys.digests import matches, text_digest, value_digests
from ledger.limits import INT8, int_problem
from ledger.log import get_logger
from ledger.store import Database
from ledger.store.config import masked
from ledger.store.notify import Listener, woken

from . import _sql
from .errors import (
    ApprovalAlreadyDecided,
    ApprovalExpired,
    ApprovalPending,
    DecisionForged,
    DecisionNotAllowed,
    InvalidApprovalRequest,
    PolicyViolation,
    TokenBindingMismatch,
    UnknownApproval,
)
from .identity import GROUP_PREFIX, reviewer_id, same_id
from .integrity import (
    ProblemKind,
    StreamProblem,
    approval_problems,
    as_facts,
    grant_statement,
    policy_problem,
    sign_review,
)
from .model import (
    MAX_ARGS_BYTES,
    Approval,
    ApprovalPolicy,
    ApprovalStatus,
    Decision,
    DecisionKind,
    Review,
    Reviewer,
    binding_of,
    check_decision,
    expiry,
    has_float,
    identifier,
    is_expired,
    json_object,
)
from .projection import APPROVALS, stream_of
from .records import NOTIFY_CHANNEL, ApprovalRecorder, Read, row_to_approval
from .reviewers import directory_groups
from .tokens import parse_token, sign_token, token_mac_ok

__all__ = ["NOTIFY_CHANNEL", "ApprovalStore", "PageCursor"]

PageCursor = tuple[datetime, str]
"""Where a page of approvals ends: the (requested_at, approval_id) of its last row."""

log = get_logger(__name__)
_KEPT = 256  # new requests a store remembers for the `wait` that follows them

Step = Callable[[asyncpg.Connection, Read], Awaitable[list[NewEvent]]]
"""What one step appends to an approval as read (`ApprovalStore._advance`)."""


def _text(value: Any, what: str) -> str:
    return identifier(value, what)


class ApprovalStore:
    """Approvals shared by every process that uses the same database."""

    def __init__(self, db: Database, ring: KeyRing, *, poll_interval: float = 0.5) -> None:
        self.db = db
        self.ring = ring
        self.journal = Journal(db)
        self.records = ApprovalRecorder(db, ring)
        self.poll_interval = poll_interval
        # Connects on first wait only: most processes never wait.
        self._listener = Listener.shared(db, NOTIFY_CHANNEL)
        # New requests of this store, as recorded, with where the listener stood before they
        # were made: a wait that follows needs no first read while nothing was notified since.
        self._requested: dict[str, tuple[Approval, tuple[int, int]]] = {}

    async def close(self) -> None:
        await self._listener.close()

    # -- requests --------------------------------------------------------------------------

    async def request(
        self,
        *,
        run_id: str,
        tool: str,
        args: dict[str, Any],
        call_id: str,
        requested_by: str,
        policy: ApprovalPolicy | None = None,
        thread_id: str | None = None,
        kind: str = "tool_call",
        thread_config: dict[str, Any] | None = None,
        connection: asyncpg.Connection | None = None,
    ) -> Approval:
        """Ask for approval of one call. The same (run, call id, arguments) returns the same
        approval. A sticky grant for this run and tool approves it at once.

        Raises:
            InvalidApprovalRequest: empty ids, arguments or config that are not JSON objects,
                text or JSON that cannot be stored (`ledger.limits`), arguments of more than
                `MAX_ARGS_BYTES`.
        """
        for value, what in (
            (run_id, "run_id"),
            (tool, "tool"),
            (call_id, "call_id"),
            (requested_by, "requested_by"),
            (kind, "kind"),
        ):
            _text(value, what)
        if thread_id is not None:
            _text(thread_id, "thread_id")
        args_text = json_object(args, "args", MAX_ARGS_BYTES)
        if thread_config is not None:
            json_object(thread_config, "thread config")
            if has_float(thread_config):  # jsonb would turn 1e23 into another number
                raise InvalidApprovalRequest("a thread config holds no floats")
        policy = policy or ApprovalPolicy()
        if not isinstance(policy, ApprovalPolicy):
            raise InvalidApprovalRequest(f"not an ApprovalPolicy: {type(policy).__name__}")
        json_object(policy.to_json(), "policy")
        expiry(policy, datetime.now(UTC))  # refuses an expiry out of range before any write
        await self.ring.fresh()
        digest = text_digest(self.ring, args_text)
        # The same request may be recorded under an older value-MAC key: look for every form.
        known = value_digests(self.ring, args_text)
        mark = self._listener.mark() if connection is None else None
        # No transaction of its own: the row and its events are one statement, and a request
        # that loses the race to an identical one reads the winner's row afterwards.
        async with self.db.connection(connection) as conn:
            now = datetime.now(UTC)
            found = await conn.fetchrow(
                _sql.BY_REQUEST_WITH_GRANT, run_id, call_id, known, tool, now
            )
            if found["approval_id"] is not None:
                return row_to_approval(found)
            approval_id = f"apr-{uuid.uuid4().hex}"
            expires_at = expiry(policy, now)
            requested = {
                "run_id": run_id,
                "thread_id": thread_id,
                "tool": tool,
                "kind": kind,
                "call_id": call_id,
                "args_digest": digest,
                "args_sealed": self.records.seal(args_text, approval_id, "args"),
                "binding": binding_of(run_id, tool, kind, digest, call_id, approval_id),
                "policy": policy.to_json(),
                "thread_config": thread_config,
                "requested_at": now.isoformat(),
                "expires_at": None if expires_at is None else expires_at.isoformat(),
            }
            events = [NewEvent("approval.requested", requested, actor=requested_by)]
            if found["active_grant"] is not None:
                review = await self._granted(conn, found["active_grant"], policy, requested_by, now)
                if review is not None:
                    decided = review.to_json() | {"final": True, "decided_by": [review.reviewer]}
                    events.append(NewEvent("approval.decided", decided, actor=review.reviewer))
            approval = await self.records.commit(conn, approval_id, None, events)
            if approval is None:  # another process asked the same question a moment ago
                row = await conn.fetchrow(_sql.BY_REQUEST, run_id, call_id, known)
                return row_to_approval(row)
        if mark is not None:
            if len(self._requested) >= _KEPT:  # the oldest, never waited for, go first
                del self._requested[next(iter(self._requested))]
            self._requested[approval_id] = (approval, mark)
        log.info(
            "approval requested",
            approval_id=approval_id,
            run_id=run_id,
            call_id=call_id,
            tool=tool,
            status=str(approval.status),
        )
        return approval

    async def grant(
        self, *, run_id: str, tool: str, until: datetime, granted_by: Reviewer | str
    ) -> str:
        """A sticky grant: requests for `tool` in `run_id` whose policy lets `granted_by` approve
        them (quorum 1) are approved until `until`. Signed by the reviewer side.

        Raises:
            ReviewerKekMissing: this store's ring cannot sign (an agent worker's).
        """
        who = _reviewer(granted_by)
        _text(run_id, "run_id")
        _text(tool, "tool")
        if not isinstance(until, datetime) or until.tzinfo is None:
            raise InvalidApprovalRequest("`until` must be timezone-aware")
        async with self.db.connection() as conn:  # the granter's groups: the directory's
            who = await self._from_directory(conn, who.id)
        grant_id = f"grant-{uuid.uuid4().hex}"
        now = datetime.now(UTC)
        data: dict[str, Any] = {
            "grant_id": grant_id,
            "run_id": run_id,
            "tool": tool,
            "granted_by": who.id,
            "groups": sorted(who.groups),
            "at": now.isoformat(),
            "until": until.isoformat(),
        }
        await self.ring.fresh()
        self.ring.require_decision_signer()
        data["signature"] = sign_statement(self.ring, grant_statement(data))
        granted_by = who.id
        async with self.db.connection() as conn:  # the row and its `grant:<id>` event, at once
            await conn.execute(
                _sql.GRANT, grant_id, run_id, tool, granted_by, now, until, jcs_json(data)
            )
        return grant_id

    # -- decisions -------------------------------------------------------------------------

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
        `approval.decided` event, so a retry finds its answer (`decision_of_request`).

        `reviewer` is the reviewer's id (normalised: `identity.reviewer_id`), or a `Reviewer`
        without groups. Its groups are read from the reviewer directory with the approval it
        decides, never taken from the caller: a policy's `group:<name>`
        matches only a reviewer the directory puts in that group.

        Raises:
            UnknownApproval, ApprovalAlreadyDecided, ApprovalExpired (recorded as expired),
            DecisionNotAllowed (policy; a reviewer outside the directory for a policy that
            names groups), InvalidApprovalRequest (malformed decision; a `Reviewer` that
            carries groups), InvalidReviewerId (a refused reviewer id),
            ReviewerKekMissing (this store's ring cannot sign: an agent worker's).
        """
        _text(approval_id, "approval id")
        if request_id is not None:
            _text(request_id, "request id")
        who = _reviewer(reviewer)
        payload = self._decision_payload(decision)
        await self.ring.fresh()
        self.ring.require_decision_signer()  # before anything is written, expiry included

        async def step(_: asyncpg.Connection, read: Read) -> list[NewEvent]:
            approval = read.approval
            if approval.status is ApprovalStatus.PENDING and _due(approval):
                return [_closing("approval.expired")]
            deciding, policy = who, approval.policy
            if not approval.status.final and policy.names_groups and who.id not in policy.approvers:
                # Where a group could let this reviewer decide: its directory groups.
                deciding = Reviewer(who.id, read.reviewer_groups or frozenset())
            return [self._review(approval, decision, deciding, payload, request_id)]

        approval, events = await self._advance(approval_id, step, reviewer=who.id)
        if events[0].type == "approval.expired":
            raise ApprovalExpired(approval_id)
        log.info(
            "approval decided",
            approval_id=approval_id,
            reviewer=who.id,
            decision=str(decision.kind),
            status=str(approval.status),
        )
        return approval

    async def cancel(self, approval_id: str, by: str) -> Approval:
        """Withdraw a pending request (it will never run)."""
        _text(approval_id, "approval id")
        _text(by, "by")

        async def step(_: asyncpg.Connection, read: Read) -> list[NewEvent]:
            if read.approval.status.final:
                raise ApprovalAlreadyDecided(approval_id, f"already {read.approval.status}")
            return [_closing("approval.cancelled", actor=by)]

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
        await self.ring.fresh()

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
                if not _due(approval):
                    raise ApprovalPending(approval_id)
                events.append(_closing("approval.expired"))
            at = datetime.now(UTC).isoformat()
            consumed = {"task_run_id": task_run_id, "at": at}
            events.append(NewEvent("approval.consumed", consumed, actor=task_run_id))
            return events

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
        await self.ring.fresh()
        events = await self.journal.read_stream(stream_of(approval_id))
        return await approval_problems(self.ring, events)

    async def verify_projection(self) -> list[str]:
        """Rebuild every approval from its stream and compare with the `approvals` table;
        return the differences (none when the projection is true to the journal)."""
        return await verify_projection(self.db, APPROVALS)

    # -- reading ---------------------------------------------------------------------------

    async def get(self, approval_id: str, *, reveal: bool = False) -> Approval:
        """One approval; with `reveal`, its arguments and decision decrypted."""
        _text(approval_id, "approval id")
        async with self.db.connection() as conn:
            row = await conn.fetchrow(_sql.BY_ID, approval_id)
        if row is None:
            raise UnknownApproval(approval_id)
        approval = row_to_approval(row)
        if not reveal:
            return approval
        await self.ring.fresh()
        first = (await self.journal.read_stream(stream_of(approval_id)))[0]
        args = json.loads(await self.records.open(first.data["args_sealed"], approval_id, "args"))
        decision = await self.final_decision(approval) if approval.status.final else None
        return replace(approval, args=args, decision=decision)

    async def find(
        self,
        *,
        status: ApprovalStatus | None = None,
        run_id: str | None = None,
        tool: str | None = None,
        after: PageCursor | None = None,
        limit: int = 100,
        admitting: Reviewer | None = None,
    ) -> list[Approval]:
        """Approvals oldest first (by request time, then id), after `after` when given; with
        `admitting`, only those whose approvers admit that reviewer (by its id or groups)."""
        if run_id is not None:
            _text(run_id, "run_id")
        if tool is not None:
            _text(tool, "tool")
        if (problem := int_problem(limit, (0, INT8[1]))) is not None:
            raise InvalidApprovalRequest(f"limit {problem}")
        at, last = (None, None) if after is None else after
        if at is not None and (not isinstance(at, datetime) or at.tzinfo is None):
            raise InvalidApprovalRequest("a page cursor's time must be timezone-aware")
        if last is not None:
            _text(last, "a page cursor's approval id")
        if status is not None and status not in set(ApprovalStatus):
            raise InvalidApprovalRequest(f"not an approval status: {status!r}")
        names = _admitting_names(admitting)
        query = _sql.listing(
            None if status is None else ApprovalStatus(status).value,
            run_id=run_id is not None,
            after=at is not None,
            tool=tool is not None,
            admitting=names is not None,
        )
        arguments: list[Any] = [] if run_id is None else [run_id]
        if at is not None:
            arguments += [at, last]
        arguments += [a for a in (tool, names) if a is not None]
        async with self.db.connection() as conn:
            rows = await conn.fetch(query, *arguments, limit)
        return [row_to_approval(r) for r in rows]

    async def pending(
        self,
        *,
        run_id: str | None = None,
        reviewer: Reviewer | str | None = None,
        limit: int = 100,
    ) -> list[Approval]:
        """What reviewers have to decide (not yet expired), oldest first; for `reviewer` (an id,
        or a `Reviewer` without groups), only what its policy lets it decide, with the groups
        the reviewer directory gives it."""
        page, _ = await self.pending_page(reviewer=reviewer, run_id=run_id, limit=limit)
        return page

    async def pending_page(
        self,
        *,
        reviewer: Reviewer | str | None = None,
        run_id: str | None = None,
        tool: str | None = None,
        after: PageCursor | None = None,
        limit: int = 100,
        scan: int = 2000,
    ) -> tuple[list[Approval], PageCursor | None]:
        """One page of `pending` (for `reviewer`, or everyone's when None), and the cursor of
        the next page (None at the end). Pending requests the reviewer may not decide are not
        read (the query matches approvers); expired ones are skipped, at most `scan` of them
        read for one page, so a page may be short while a cursor still says there is more."""
        if (problem := int_problem(limit, (1, 1000))) is not None:
            raise InvalidApprovalRequest(f"limit {problem}")
        who = None
        if reviewer is not None:
            rid = _reviewer(reviewer).id
            async with self.db.connection() as conn:
                who = Reviewer(rid, await directory_groups(conn, rid) or frozenset())
        now = datetime.now(UTC)
        page: list[Approval] = []
        scanned = 0
        cursor = after
        while True:
            batch = await self.find(
                status=ApprovalStatus.PENDING,
                run_id=run_id,
                tool=tool,
                after=cursor,
                limit=limit,
                admitting=who,
            )
            for approval in batch:
                scanned += 1
                cursor = (approval.requested_at, approval.approval_id)
                if not is_expired(approval.expires_at, now) and (
                    who is None or who.matches(approval.policy.approvers)
                ):
                    page.append(approval)
                    if len(page) == limit:
                        return page, cursor
            if len(batch) < limit:
                return page, None
            if scanned >= scan:
                return page, cursor

    async def decision_of_request(
        self, approval_id: str, reviewer: str, request_id: str
    ) -> DecisionKind | None:
        """The decision `reviewer` recorded on this approval with a client's `request_id`
        (`decide(..., request_id=)`), or None: how a retried request finds its answer."""
        _text(approval_id, "approval id")
        rid = reviewer_id(reviewer)
        for event in await self.journal.read_stream(stream_of(approval_id)):
            data = event.data
            if (
                event.type == "approval.decided"
                and event.actor == rid
                and data.get("request_id") == request_id
            ):
                return DecisionKind(data["decision"])
        return None

    async def wait(self, approval_id: str, seconds: float) -> Approval:
        """Wait up to `seconds` for a final decision; return the approval as it then is.

        Wakes on the NOTIFY sent when a decision commits in any process, and re-checks every
        `poll_interval` seconds in case the listening connection was lost.
        """
        listener = self._listener
        await listener.start()
        deadline = time.monotonic() + seconds
        approval: Approval | None = None
        requested = self._requested.pop(approval_id, None)
        stream = stream_of(approval_id)
        with listener.waiting(stream) as event:
            while True:
                event.clear()
                as_recorded = False
                try:
                    if requested and listener.quiet_since(stream, requested[1]):
                        # Made here while this listener listened, and nothing notified since:
                        # still as recorded (a decision from now on wakes this wait). Only
                        # once, and never returned unread (a vote of a quorum notifies nobody).
                        approval, as_recorded = requested[0], True
                    else:
                        approval = await self.get(approval_id)
                    requested = None
                    if approval.status is ApprovalStatus.PENDING and _due(approval):
                        approval = await self._expire_due(approval_id)
                except DatabaseUnavailable as e:
                    log.warning(
                        "approval wait: database unavailable", approval_id=approval_id, error=str(e)
                    )
                if approval is not None and approval.status.final:
                    return approval
                remaining = deadline - time.monotonic()
                if remaining <= 0 and not as_recorded:
                    if approval is None:
                        raise DatabaseUnavailable(masked(self.db.url), "no answer while waiting")
                    return approval
                await woken(event, min(self.poll_interval, remaining))

    async def issue_token(self, approval_id: str) -> str:
        """A signed resume token for the approval's final decision.

        Raises:
            ApprovalPending: not decided yet.
        """
        approval = await self.get(approval_id)
        if not approval.status.final:
            raise ApprovalPending(approval_id)
        await self.ring.fresh()
        return sign_token(self.ring, approval_id, approval.binding, approval.status.value)

    async def verify_token(
        self,
        token: str,
        *,
        run_id: str,
        tool: str,
        args: dict[str, Any],
        call_id: str,
        kind: str = "tool_call",
    ) -> Approval:
        """Check a resume token against the call it is meant for, in any process.

        Raises:
            TokenMalformed, TokenForged, UnknownKey (key id unknown or retired),
            TokenBindingMismatch (another run, tool, arguments or call), UnknownApproval,
            ApprovalExpired, ApprovalAlreadyDecided (its decision was consumed already),
            InvalidApprovalRequest (malformed ids or arguments).
        """
        for value, what in ((run_id, "run_id"), (tool, "tool"), (call_id, "call_id")):
            _text(value, what)
        args_text = json_object(args, "args")
        parsed = parse_token(token)
        await token_mac_ok(self.ring, parsed)
        approval = await self.get(parsed.approval_id)
        # The request's digest is checked under the key it names (maybe rotated out since);
        # the binding then holds that digest.
        same_args = await matches(self.ring, approval.args_digest, args_text)
        expected = binding_of(
            run_id, tool, kind, approval.args_digest, call_id, approval.approval_id
        )
        if not (
            same_args
            and hmac.compare_digest(parsed.binding, expected)
            and hmac.compare_digest(approval.binding, expected)
        ):
            raise TokenBindingMismatch(
                f"resume token for approval {approval.approval_id} is bound to another run, "
                "tool, arguments or call"
            )
        if approval.consumed:
            raise ApprovalAlreadyDecided(approval.approval_id, "its decision was used already")
        if approval.status is ApprovalStatus.EXPIRED:
            raise ApprovalExpired(approval.approval_id)
        return approval

    async def final_decision(self, approval: Approval) -> Decision:
        """The decision a final approval stands for (expired and cancelled deny)."""
        status = approval.status
        last = approval.reviews[-1] if approval.reviews else None
        if status is ApprovalStatus.APPROVED:
            return Decision.approve()
        if status is ApprovalStatus.REJECTED:
            return Decision.reject(None if last is None else await self.reason_of(approval, last))
        if status is ApprovalStatus.EDITED and last is not None and last.args_sealed is not None:
            edited = json.loads(
                await self.records.open(
                    last.args_sealed, approval.approval_id, f"edit:{last.reviewer}"
                )
            )
            signed = last.args_digest  # the digest is what was signed
            if signed is None or not await matches(self.ring, signed, canonical_json(edited)):
                raise DecisionForged(approval.approval_id, "its edited arguments are not signed")
            return Decision.edit(edited)
        if (
            status is ApprovalStatus.RESPONDED
            and last is not None
            and last.message_sealed is not None
        ):
            message = await self.records.open(last.message_sealed, approval.approval_id, "respond")
            return Decision.respond(message)
        if status is ApprovalStatus.EXPIRED:
            return Decision.reject("the approval request expired before anyone decided")
        if status is ApprovalStatus.CANCELLED:
            return Decision.reject("the approval request was cancelled")
        raise ApprovalPending(approval.approval_id)

    async def reason_of(self, approval: Approval, review: Review) -> str | None:
        """A review's reason in clear, opened from its sealed form; None when it gave none.

        Raises:
            UnknownKey, DecryptionFailed: the sealed reason is not this review's, or its key is
                retired.
        """
        if review.reason_sealed is None:
            return None
        part = _reason_part(review.decision, review.reviewer)
        return await self.records.open(review.reason_sealed, approval.approval_id, part)

    # -- internals -------------------------------------------------------------------------

    async def _expire_due(self, approval_id: str) -> Approval:
        """Record the expiry of a pending request whose time is up (once, whoever is first)."""

        async def step(_: asyncpg.Connection, read: Read) -> list[NewEvent]:
            approval = read.approval
            if approval.status is not ApprovalStatus.PENDING or not _due(approval):
                return []
            return [_closing("approval.expired")]

        approval, _ = await self._advance(approval_id, step)
        return approval

    async def _advance(
        self,
        approval_id: str,
        step: Step,
        *,
        stream: bool = False,
        reviewer: str | None = None,
    ) -> tuple[Approval, list[NewEvent]]:
        """Read the approval (with its stream, and `reviewer`'s directory groups, when asked),
        let `step` say what to append (nothing: the approval as read), and commit that fenced
        at the version read, each in a statement of its own. When another step moved the
        approval in between, nothing was written: read again. A retry that finds the approval
        where the last attempt left it means a stream out of step with its row, not a race:
        `VersionConflict` then, rather than trying for ever."""
        conflict: VersionConflict | None = None
        while True:
            try:
                async with self.db.connection() as conn:
                    read = await self.records.to_advance(
                        conn, approval_id, stream=stream, reviewer=reviewer
                    )
                    if read is None:
                        raise UnknownApproval(approval_id)
                    if conflict is not None and conflict.expected_version == read.approval.version:
                        break
                    events = await step(conn, read)
                    if not events:
                        return read.approval, events
                    approval = await self.records.commit(conn, approval_id, read.approval, events)
            except VersionConflict as e:  # the other step had not committed when this wrote
                conflict = e
                continue
            if approval is not None:
                return approval, events
            conflict = VersionConflict(stream_of(approval_id), read.approval.version, None)
        raise conflict

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

    async def _granted(
        self,
        conn: asyncpg.Connection,
        grant_id: str,
        policy: ApprovalPolicy,
        requested_by: str,
        now: datetime,
    ) -> Review | None:
        """The approval a sticky grant gives a new request: its signed grant checked, and its
        policy allowing the grant's reviewer alone; else None (the request waits)."""
        events = await self.journal.read_stream(f"grant:{grant_id}", connection=conn)
        grant = events[0].data if events and events[0].type == "approval.granted" else None
        if grant is None or "signature" not in grant:
            log.warning("sticky grant unsigned: not used", grant_id=grant_id)
            return None
        why = await statement_ok(self.ring, grant_statement(grant), grant["signature"])
        if why is not None:
            log.warning("sticky grant refused", grant_id=grant_id, problem=why)
            return None
        review = Review(
            grant["granted_by"],
            DecisionKind.APPROVE,
            now,
            grant_id=grant_id,
            groups=tuple(grant["groups"]),
            grant=grant,
        )
        if policy.quorum > 1 or policy_problem(policy, requested_by, None, (), review):
            return None
        return review

    async def _from_directory(self, conn: asyncpg.Connection, rid: str) -> Reviewer:
        """The reviewer with its directory groups (none when it is not in the directory)."""
        return Reviewer(rid, await directory_groups(conn, rid) or frozenset())

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
        if decision.kind not in policy.allowed:
            raise DecisionNotAllowed(approval_id, f"the policy does not allow {decision.kind}")
        if same_id(who.id, approval.requested_by) and not policy.allow_self_approval:
            raise DecisionNotAllowed(approval_id, f"{who.id} requested it and may not decide it")
        if not who.matches(policy.approvers):
            hint = (
                " (groups are the reviewer directory's, and it puts this reviewer in none of "
                "the policy's)"
                if policy.names_groups
                else ""
            )
            raise DecisionNotAllowed(approval_id, f"{who.id} is not an approver of this tool{hint}")
        if policy.quorum > 1 and decision.kind in (DecisionKind.EDIT, DecisionKind.RESPOND):
            raise DecisionNotAllowed(approval_id, "with a quorum only approve or reject")
        approvers = set(approval.approvers)
        if decision.kind is DecisionKind.APPROVE and who.id in approvers:
            raise DecisionNotAllowed(
                approval_id,
                f"{who.id} approved already; {policy.quorum} distinct reviewers needed",
            )
        edited, answer = payload.get("args_text"), payload.get("message")
        review = Review(
            reviewer=who.id,
            decision=decision.kind,
            at=datetime.now(UTC),
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


def _reason_part(kind: DecisionKind, reviewer: str) -> str:
    """Where a reason is sealed: one reviewer's one kind of decision on one approval (a
    reviewer approves at most once, and any other decision is final)."""
    return f"reason:{kind}:{reviewer}"


def _reviewer(reviewer: Reviewer | str) -> Reviewer:
    """The deciding reviewer, id normalised, with no groups: those are the directory's."""
    if isinstance(reviewer, Reviewer):
        if reviewer.groups:
            raise InvalidApprovalRequest(
                f"reviewer {reviewer.id}: groups come from the reviewer directory "
                "(ReviewerDirectory, `signoff reviewers add`), not from the caller; pass the id"
            )
        return reviewer
    return Reviewer(reviewer_id(reviewer))


def _admitting_names(reviewer: Reviewer | None) -> list[str] | None:
    """The approver names that admit `reviewer`: its id and its groups (None: anyone's)."""
    if reviewer is None:
        return None
    return [reviewer.id, *(f"{GROUP_PREFIX}{g}" for g in sorted(reviewer.groups))]


def _due(approval: Approval) -> bool:
    return is_expired(approval.expires_at, datetime.now(UTC))


def _closing(type_: str, actor: str = "signoff") -> NewEvent:
    """An event that ends a pending request without a decision (expired, cancelled)."""
    return NewEvent(type_, {"at": datetime.now(UTC).isoformat()}, actor=actor)


def _committed(approval: Approval | None) -> Approval:
    if approval is None:  # only a new request can lose its insert
        raise RuntimeError("an update of an existing approval wrote nothing")
    return approval
