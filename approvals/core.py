"""What every part of the approval store shares: its state, the step that advances an
approval (`StoreCore._advance`), and opening a final decision.

A step on an approval (decide, cancel, expire, consume) reads it and commits its events fenced
at the version it read: one read and one write, no lock and no transaction around them. When
another step committed in between (a second reviewer, a racing consumer), nothing is written and
the step reads again, so concurrent reviewers take turns and the second consumer finds the
decision used.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import asyncpg

from ledger.canonical import canonical_json
from ledger.errors import VersionConflict
from ledger.journal import Journal, NewEvent
from ledger.keys import KeyRing
from ledger.keys.digests import matches
from ledger.log import get_logger
from ledger.store import Database
from ledger.store.notify import Listener

from .errors import (
    ApprovalPending,
    DecisionForged,
    InvalidApprovalRequest,
    UnknownApproval,
)
from .identity import GROUP_PREFIX, reviewer_id
from .integrity import CLOSED_BY
from .model import (
    Approval,
    ApprovalStatus,
    Decision,
    DecisionKind,
    Review,
    Reviewer,
    identifier,
    is_expired,
)
from .projection import stream_of
from .records import NOTIFY_CHANNEL, ApprovalRecorder, Read

__all__ = ["NOTIFY_CHANNEL", "PageCursor", "StoreCore"]

PageCursor = tuple[datetime, str]
"""Where a page of approvals ends: the (requested_at, approval_id) of its last row."""

# One logger for every part of the store: operators filter on one name.
log = get_logger("approvals.store")
_KEPT = 256  # new requests a store remembers for the `wait` that follows them

Step = Callable[[asyncpg.Connection, Read], Awaitable[list[NewEvent]]]
"""What one step appends to an approval as read (`StoreCore._advance`)."""


def _text(value: Any, what: str) -> str:
    return identifier(value, what)


class StoreCore:
    """The state the store's parts share (`ApprovalStore` composes them)."""

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
            why = await self.cancel_reason_of(approval)
            said = "" if why is None else f": {why}"
            return Decision.reject(f"the approval request was cancelled{said}")
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

    async def cancel_reason_of(self, approval: Approval) -> str | None:
        """A cancelled approval's reason in clear; None when it gave none (or it is not
        cancelled)."""
        if approval.status is not ApprovalStatus.CANCELLED:
            return None
        events = await self.journal.read_stream(stream_of(approval.approval_id))
        sealed = next(
            (e.data.get("reason_sealed") for e in events if e.type == "approval.cancelled"), None
        )
        if sealed is None:
            return None
        return await self.records.open(sealed, approval.approval_id, CANCEL_REASON_PART)

    # -- internals -------------------------------------------------------------------------

    async def _expire_due(self, approval_id: str) -> Approval:
        """Record the expiry of a pending request whose time is up (once, whoever is first)."""

        async def step(_: asyncpg.Connection, read: Read) -> list[NewEvent]:
            approval = read.approval
            if approval.status is not ApprovalStatus.PENDING or not _due(approval, read.now):
                return []  # not due by the server's clock yet (this host's may run ahead)
            return [_closing("approval.expired", at=read.now)]

        approval, _ = await self._advance(approval_id, step)
        return approval

    async def _advance(
        self,
        approval_id: str,
        step: Step,
        *,
        stream: bool = False,
        reviewer: str | None = None,
        request_id: str | None = None,
    ) -> tuple[Approval, list[NewEvent]]:
        """Read the approval (with its stream when asked; for a decision by `reviewer`, with its
        directory groups and what it recorded under `request_id`), let `step` say what to
        append (nothing: the approval as read), and commit that fenced
        at the version read, each in a statement of its own. When another step moved the
        approval in between, nothing was written: read again. A retry that finds the approval
        where the last attempt left it means a stream out of step with its row, not a race:
        `VersionConflict` then, rather than trying for ever."""
        conflict: VersionConflict | None = None
        while True:
            try:
                async with self.db.connection() as conn:
                    read = await self.records.to_advance(
                        conn, approval_id, stream=stream, reviewer=reviewer, request_id=request_id
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


CANCEL_REASON_PART = "reason:cancel"
"""Where a cancellation's reason is sealed (an approval is cancelled at most once)."""


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


def _due(approval: Approval, now: datetime | None = None) -> bool:
    """Whether the request's expiry has passed: by `now` (the server's clock, as a step
    read it: what the database checks an expiry by), else by this host's."""
    return is_expired(approval.expires_at, now or datetime.now(UTC))


def _closing(type_: str, actor: str = CLOSED_BY, at: datetime | None = None) -> NewEvent:
    """An event that ends a pending request without a decision (expired, cancelled)."""
    return NewEvent(type_, {"at": (at or datetime.now(UTC)).isoformat()}, actor=actor)


def _committed(approval: Approval | None) -> Approval:
    if approval is None:  # only a new request can lose its insert
        raise RuntimeError("an update of an existing approval wrote nothing")
    return approval
