"""Reading approvals: one by id, pages of them, what a reviewer has to decide, waiting for a
decision (LISTEN/NOTIFY with a timer as fallback), and resume tokens."""

from __future__ import annotations

import hmac
import json
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from ledger.errors import DatabaseUnavailable
from ledger.keys.digests import matches
from ledger.limits import INT8, int_problem
from ledger.store.config import masked
from ledger.store.notify import woken
from ledger.telemetry import Attr, span

from . import _sql
from .context import RequestContext
from .core import PageCursor, StoreCore, _admitting_names, _due, _reviewer, _text, log
from .errors import (
    ApprovalAlreadyDecided,
    ApprovalExpired,
    ApprovalPending,
    InvalidApprovalRequest,
    TokenBindingMismatch,
    UnknownApproval,
)
from .model import (
    Approval,
    ApprovalStatus,
    Reviewer,
    binding_of,
    is_expired,
    json_object,
)
from .projection import stream_of
from .records import row_to_approval
from .reviewers import directory_groups
from .tokens import parse_token, sign_token, token_mac_ok
from .tracing import WAIT_SPAN, waited

__all__ = ["Reading"]


class Reading(StoreCore):
    """Reading, waiting and resume tokens."""

    async def get(self, approval_id: str, *, reveal: bool = False) -> Approval:
        """One approval; with `reveal`, its arguments, its context (`RequestContext`, empty
        when none was captured) and its decision decrypted."""
        _text(approval_id, "approval id")
        async with self.db.connection() as conn:
            row = await conn.fetchrow(_sql.BY_ID, approval_id)
        if row is None:
            raise UnknownApproval(approval_id)
        approval = row_to_approval(row)
        if not reveal:
            return approval
        first = (await self.journal.read_stream(stream_of(approval_id)))[0]
        args = json.loads(await self.records.open(first.data["args_sealed"], approval_id, "args"))
        context = RequestContext()
        if (sealed := first.data.get("context_sealed")) is not None:
            context = RequestContext.from_text(
                await self.records.open(sealed, approval_id, "context")
            )
        decision = await self.final_decision(approval) if approval.status.final else None
        return replace(approval, args=args, decision=decision, context=context)

    async def find(
        self,
        *,
        status: ApprovalStatus | None = None,
        run_id: str | None = None,
        tool: str | None = None,
        after: PageCursor | None = None,
        limit: int = 100,
        admitting: Reviewer | None = None,
        requested_by: str | None = None,
    ) -> list[Approval]:
        """Approvals oldest first (by request time, then id), after `after` when given; with
        `admitting`, only those whose approvers admit that reviewer (by its id or groups); with
        `requested_by`, only those that principal requested."""
        for value, what in ((run_id, "run_id"), (tool, "tool"), (requested_by, "requested_by")):
            if value is not None:
                _text(value, what)
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
            requested_by=requested_by is not None,
        )
        arguments: list[Any] = [] if run_id is None else [run_id]
        if at is not None:
            arguments += [at, last]
        arguments += [a for a in (tool, names, requested_by) if a is not None]
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
        requested_by: str | None = None,
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
        who = await self._with_groups(reviewer)
        now = datetime.now(UTC)

        async def fetch(cursor: PageCursor | None) -> list[Approval]:
            return await self.find(
                status=ApprovalStatus.PENDING,
                run_id=run_id,
                tool=tool,
                after=cursor,
                limit=limit,
                admitting=who,
                requested_by=requested_by,
            )

        return await _scanned_page(
            fetch,
            lambda a: (a.requested_at, a.approval_id),
            lambda a: not is_expired(a.expires_at, now) and (who is None or _may_decide(who, a)),
            after=after,
            limit=limit,
            scan=scan,
        )

    async def history_page(
        self,
        statuses: Iterable[ApprovalStatus],
        *,
        reviewer: Reviewer | str | None = None,
        run_id: str | None = None,
        tool: str | None = None,
        requested_by: str | None = None,
        after: PageCursor | None = None,
        limit: int = 100,
        scan: int = 2000,
    ) -> tuple[list[Approval], PageCursor | None]:
        """One page of the approvals in `statuses`, newest first by decision time (a pending
        one's by its request time), for `reviewer` (only those whose policy admits it, as
        `pending_page` reads them) or everyone's when None, and the cursor of the next page
        (None at the end). At most `scan` rows are read for one page.

        Raises:
            InvalidApprovalRequest: no status or one that is not an `ApprovalStatus`, a limit
                outside 1-1000, malformed ids or cursor.
        """
        if (problem := int_problem(limit, (1, 1000))) is not None:
            raise InvalidApprovalRequest(f"limit {problem}")
        try:
            chosen = tuple(sorted({ApprovalStatus(s).value for s in statuses}))
        except ValueError as e:
            raise InvalidApprovalRequest(f"not an approval status: {e}") from e
        if not chosen:
            raise InvalidApprovalRequest("a history names at least one status")
        for value, what in ((run_id, "run_id"), (tool, "tool"), (requested_by, "requested_by")):
            if value is not None:
                _text(value, what)
        if after is not None and (not isinstance(after[0], datetime) or after[0].tzinfo is None):
            raise InvalidApprovalRequest("a page cursor's time must be timezone-aware")
        who = await self._with_groups(reviewer)
        names = _admitting_names(who)

        async def fetch(cursor: PageCursor | None) -> list[Approval]:
            query = _sql.history(
                chosen,
                run_id=run_id is not None,
                after=cursor is not None,
                tool=tool is not None,
                admitting=names is not None,
                requested_by=requested_by is not None,
            )
            arguments: list[Any] = [] if run_id is None else [run_id]
            if cursor is not None:
                arguments += [cursor[0], cursor[1]]
            arguments += [a for a in (tool, names, requested_by) if a is not None]
            async with self.db.connection() as conn:
                rows = await conn.fetch(query, *arguments, limit)
            return [row_to_approval(r) for r in rows]

        return await _scanned_page(
            fetch,
            lambda a: (a.decided_at or a.requested_at, a.approval_id),
            lambda a: who is None or _may_decide(who, a),
            after=after,
            limit=limit,
            scan=scan,
        )

    async def _with_groups(self, reviewer: Reviewer | str | None) -> Reviewer | None:
        """`reviewer` with the groups the reviewer directory gives it (None: everyone)."""
        if reviewer is None:
            return None
        rid = _reviewer(reviewer).id
        async with self.db.connection() as conn:
            groups = await directory_groups(conn, rid)
        return Reviewer(rid, groups or frozenset(), listed=groups is not None)

    async def wait(self, approval_id: str, seconds: float) -> Approval:
        """Wait up to `seconds` for a final decision; return the approval as it then is.

        Wakes on the NOTIFY sent when a decision commits in any process, and re-checks every
        `poll_interval` seconds in case the listening connection was lost.
        """
        with span(WAIT_SPAN, {Attr.APPROVAL_ID: approval_id}) as current:
            approval = await self._wait(approval_id, seconds)
            waited(current, approval)
            return approval

    async def _wait(self, approval_id: str, seconds: float) -> Approval:
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
        async with self.ring.sealing():
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


def _may_decide(who: Reviewer, approval: Approval) -> bool:
    """Whether `approval`'s policy admits `who` (one the directory does not list decides only
    where it is named)."""
    approvers = approval.policy.approvers
    return who.matches(approvers) and (bool(approvers) or who.listed)


async def _scanned_page(
    fetch: Callable[[PageCursor | None], Awaitable[list[Approval]]],
    position: Callable[[Approval], PageCursor],
    keep: Callable[[Approval], bool],
    *,
    after: PageCursor | None,
    limit: int,
    scan: int,
) -> tuple[list[Approval], PageCursor | None]:
    """Batches of `limit` rows after a cursor (`fetch`), read until `limit` approvals are kept
    or `scan` rows were read: the page, and the cursor of the next (None at the end)."""
    page: list[Approval] = []
    scanned = 0
    cursor = after
    while True:
        batch = await fetch(cursor)
        for approval in batch:
            scanned += 1
            cursor = position(approval)
            if keep(approval):
                page.append(approval)
                if len(page) == limit:
                    return page, cursor
        if len(batch) < limit:
            return page, None
        if scanned >= scan:
            return page, cursor
