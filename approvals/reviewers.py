"""The reviewer directory: who may decide for which groups, kept by Signoff, not by callers.

The `reviewers` table is the projection of the `reviewer:<id>` streams (`reviewer.added`,
`reviewer.groups_changed`, `reviewer.removed`), written with its events in one statement by
`ledger.journal.projection.commit` and rebuilt by `verify_projection`. Changing it is an
administrator's job (the owner role); every role that decides or asks reads it.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import asyncpg

from ledger.errors import ProjectionError, UnknownEventType, VersionConflict
from ledger.journal import NewEvent
from ledger.journal.projection import Fact, Projection, commit, verify_projection
from ledger.limits import name_problem
from ledger.store import Database

from . import _sql
from .errors import InvalidApprovalRequest, UnknownReviewer
from .identity import group_name, reviewer_id
from .model import Reviewer

__all__ = [
    "MAX_GROUPS",
    "REVIEWERS",
    "STREAM_PREFIX",
    "ReviewerDirectory",
    "ReviewerEntry",
    "ReviewerProjection",
    "directory_groups",
    "stream_of",
]

STREAM_PREFIX = "reviewer:"
MAX_GROUPS = 100
"""Most groups one reviewer may be in."""


def stream_of(reviewer: str) -> str:
    return STREAM_PREFIX + reviewer


@dataclass(frozen=True)
class ReviewerEntry:
    """One reviewer's row of the directory.

    Attributes:
        reviewer_id: the normalised id.
        groups: its groups, sorted (none once removed).
        active: False once removed (the row and its stream stay).
        changed_by, changed_at: who made the last change, and when.
        version: the stream version the row reflects.
    """

    reviewer_id: str
    groups: tuple[str, ...]
    active: bool
    changed_by: str
    changed_at: datetime
    version: int

    @property
    def reviewer(self) -> Reviewer:
        """The reviewer with the groups a policy may match (none when removed)."""
        return Reviewer(self.reviewer_id, frozenset(self.groups) if self.active else frozenset())


class ReviewerProjection(Projection[ReviewerEntry]):
    """The `reviewers` table."""

    table = "reviewers"
    key = ("reviewer_id",)
    stream_prefix = STREAM_PREFIX
    columns = _sql.REVIEWER_COLUMNS
    write_function = "signoff_commit_reviewer"  # the owner's only: directory changes

    def stream_of(self, record: ReviewerEntry) -> str:
        return stream_of(record.reviewer_id)

    def label(self, record: ReviewerEntry) -> str:
        return record.reviewer_id

    def from_row(self, row: Mapping[str, Any]) -> ReviewerEntry:
        return ReviewerEntry(
            reviewer_id=row["reviewer_id"],
            groups=tuple(row["groups"]),
            active=row["active"],
            changed_by=row["changed_by"],
            changed_at=row["changed_at"],
            version=row["version"],
        )

    def to_row(self, record: ReviewerEntry) -> dict[str, Any]:
        return {
            "reviewer_id": record.reviewer_id,
            "groups": list(record.groups),
            "active": record.active,
            "changed_by": record.changed_by,
            "changed_at": record.changed_at,
            "version": record.version,
        }

    def apply(self, record: ReviewerEntry | None, event: Fact) -> ReviewerEntry:
        type_, data = event.type, event.data
        at = datetime.fromisoformat(data["at"]) if "at" in data else None
        if type_ == "reviewer.added":
            if record is not None and record.active:
                raise ProjectionError(event.stream_id, "reviewer.added while in the directory")
            groups, active = tuple(data["groups"]), True
        elif record is None:
            raise ProjectionError(event.stream_id, f"{type_} before reviewer.added")
        elif not record.active:
            raise ProjectionError(event.stream_id, f"{type_} after reviewer.removed")
        elif type_ == "reviewer.groups_changed":
            groups, active = tuple(data["groups"]), True
        elif type_ == "reviewer.removed":
            groups, active = (), False
        else:
            raise UnknownEventType(event.stream_id, type_)
        if at is None:
            raise ProjectionError(event.stream_id, f"{type_} without its time")
        if record is None:
            return ReviewerEntry(
                event.stream_id.removeprefix(STREAM_PREFIX),
                groups,
                active,
                event.actor,
                at,
                event.version,
            )
        return replace(
            record,
            groups=groups,
            active=active,
            changed_by=event.actor,
            changed_at=at,
            version=event.version,
        )


REVIEWERS = ReviewerProjection()


async def directory_groups(conn: asyncpg.Connection, reviewer: str) -> frozenset[str] | None:
    """The groups of a reviewer in the directory, read on `conn` (in its transaction); None
    when it is not in the directory (never added, or removed)."""
    groups = await conn.fetchval(_sql.GROUPS_OF, reviewer)
    return None if groups is None else frozenset(groups)


Step = Callable[[ReviewerEntry | None], list[NewEvent]]


class ReviewerDirectory:
    """The reviewer directory of one database. Reading needs SELECT on `reviewers` (workers,
    reviewers); changing it is the owner's (administrators), and every change is journaled."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def add(self, reviewer: str, groups: Iterable[str] = (), *, by: str) -> ReviewerEntry:
        """Put `reviewer` in the directory with exactly `groups`. A new or removed reviewer
        is `reviewer.added`; one already in it with other groups `reviewer.groups_changed`;
        the same groups again change nothing (no event).

        Raises:
            InvalidReviewerId: the id or a group name is refused (`identity.reviewer_id`).
            InvalidApprovalRequest: `by` is no usable name, or more than `MAX_GROUPS` groups.
            VersionConflict: another change of this reviewer committed first; nothing written.
        """
        wanted = _groups(groups)

        def step(entry: ReviewerEntry | None) -> list[NewEvent]:
            if entry is None or not entry.active:
                return [_event("reviewer.added", by, groups=list(wanted))]
            if entry.groups == wanted:
                return []
            return [_event("reviewer.groups_changed", by, groups=list(wanted))]

        return await self._change(reviewer, by, step)

    async def set_groups(self, reviewer: str, groups: Iterable[str], *, by: str) -> ReviewerEntry:
        """Change the groups of a reviewer in the directory (`reviewer.groups_changed`).

        Raises:
            UnknownReviewer: not in the directory.
            InvalidReviewerId, InvalidApprovalRequest, VersionConflict: as `add`.
        """
        wanted = _groups(groups)

        def step(entry: ReviewerEntry | None) -> list[NewEvent]:
            if entry is None or not entry.active:
                raise UnknownReviewer(reviewer_id(reviewer))
            if entry.groups == wanted:
                return []
            return [_event("reviewer.groups_changed", by, groups=list(wanted))]

        return await self._change(reviewer, by, step)

    async def remove(self, reviewer: str, *, by: str) -> ReviewerEntry:
        """Take a reviewer out of the directory (`reviewer.removed`): it decides for no group
        from then on. Its row and stream stay.

        Raises:
            UnknownReviewer: not in the directory.
            InvalidReviewerId, InvalidApprovalRequest, VersionConflict: as `add`.
        """

        def step(entry: ReviewerEntry | None) -> list[NewEvent]:
            if entry is None or not entry.active:
                raise UnknownReviewer(reviewer_id(reviewer))
            return [_event("reviewer.removed", by)]

        return await self._change(reviewer, by, step)

    async def get(self, reviewer: str) -> ReviewerEntry:
        """One reviewer's entry (also a removed one's).

        Raises:
            UnknownReviewer: never in the directory.
            InvalidReviewerId: the id is refused.
        """
        rid = reviewer_id(reviewer)
        async with self.db.connection() as conn:
            row = await conn.fetchrow(_sql.REVIEWER_BY_ID, rid)
        if row is None:
            raise UnknownReviewer(rid)
        return REVIEWERS.from_row(row)

    async def list(self, *, include_removed: bool = False) -> list[ReviewerEntry]:
        """The reviewers in the directory by id (with `include_removed`, the removed too)."""
        async with self.db.connection() as conn:
            rows = await conn.fetch(_sql.REVIEWER_LIST, bool(include_removed))
        return [REVIEWERS.from_row(r) for r in rows]

    async def verify_projection(self) -> builtins.list[str]:
        """Rebuild the directory from the journal and compare with the `reviewers` table."""
        return await verify_projection(self.db, REVIEWERS)

    async def _change(self, reviewer: str, by: str, step: Step) -> ReviewerEntry:
        rid = reviewer_id(reviewer)
        if (problem := name_problem(by)) is not None:
            raise InvalidApprovalRequest(f"by {problem}")
        stream = stream_of(rid)
        async with self.db.transaction() as conn:
            row = await conn.fetchrow(_sql.REVIEWER_BY_ID, rid)
            entry = None if row is None else REVIEWERS.from_row(row)
            events = step(entry)
            if not events and entry is not None:  # nothing to change
                return entry
            expected = 0 if entry is None else entry.version
            new = await commit(conn, REVIEWERS, stream, entry, events, expected_version=expected)
        if new is None:  # a racing change wrote the row first
            raise VersionConflict(stream, expected, None)
        return new


def _groups(groups: Iterable[str]) -> tuple[str, ...]:
    if isinstance(groups, str):
        raise InvalidApprovalRequest("groups must be a list of names, not one string")
    wanted = tuple(sorted({group_name(g) for g in groups}))
    if len(wanted) > MAX_GROUPS:
        raise InvalidApprovalRequest(f"a reviewer is in at most {MAX_GROUPS} groups")
    return wanted


def _event(type_: str, by: str, **data: Any) -> NewEvent:
    return NewEvent(type_, data | {"at": datetime.now(UTC).isoformat()}, actor=by)
