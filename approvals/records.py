"""The approval store's recorder: the `approvals` projection's rows and streams, and the sealed
arguments, edits and answers. What a decision may do is `ApprovalStore`'s business.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from ledger.journal import NewEvent
from ledger.journal.projection import Fact, commit
from ledger.keys import KeyRing
from ledger.keys.values import as_text, from_text, open_value, seal_value
from ledger.store import Database

from . import _sql
from .integrity import mac_events
from .model import Approval, DecisionKind
from .projection import APPROVALS, NOTIFY_CHANNEL, row_to_approval, stream_of

__all__ = ["NOTIFY_CHANNEL", "ApprovalRecorder", "Read", "row_to_approval"]


class ApprovalRecorder:
    """Reads and writes approvals: rows, their streams, their sealed values."""

    def __init__(self, db: Database, ring: KeyRing) -> None:
        self.db = db
        self.ring = ring

    async def commit(
        self,
        conn: asyncpg.Connection,
        approval_id: str,
        state: Approval | None,
        events: list[NewEvent],
    ) -> Approval | None:
        """Append `events` and write the approval they make, in one statement in `conn`'s
        transaction, fenced at `state`'s version. None when nothing was written: a new request
        lost the race to an identical one, or another step moved the approval on from `state`
        (`VersionConflict` instead when that step has not committed yet). Every event but a
        reviewer's signed decision is MACed here (`integrity.mac_events`)."""
        base = 0 if state is None else state.version
        stream = stream_of(approval_id)
        binding = events[0].data["binding"] if state is None else state.binding
        events = mac_events(self.ring, binding, stream, base, events)
        return await commit(conn, APPROVALS, stream, state, events, expected_version=base)

    def seal(self, text: str, approval_id: str, part: str) -> str:
        """`text` sealed to this approval's `part`, as event JSON holds it."""
        return as_text(seal_value(self.ring, stream_of(approval_id), part, text))

    async def open(self, sealed: str, approval_id: str, part: str) -> str:
        return await open_value(self.ring, stream_of(approval_id), part, from_text(sealed))

    async def to_advance(
        self,
        conn: asyncpg.Connection,
        approval_id: str,
        *,
        stream: bool = False,
        reviewer: str | None = None,
        request_id: str | None = None,
    ) -> Read | None:
        """The approval as a step reads it (no lock): with its stream when `stream`
        (`_sql.TO_CONSUME`); for a decision by `reviewer` when given, with its directory
        groups and what it recorded before under `request_id` (`_sql.TO_DECIDE`); else the
        row alone (`_sql.TO_ADVANCE`). None if unknown."""
        if stream:
            row = await conn.fetchrow(_sql.TO_CONSUME, approval_id)
        elif reviewer is not None:
            row = await conn.fetchrow(_sql.TO_DECIDE, approval_id, reviewer, request_id)
        else:
            row = await conn.fetchrow(_sql.TO_ADVANCE, approval_id)
        return None if row is None else _read(approval_id, row)

    async def locked_with_stream(self, conn: asyncpg.Connection, approval_id: str) -> Read | None:
        """The approval and its stream, its row locked until `conn`'s transaction ends (the
        stream's snapshot may be older than the locked row: `_sql.LOCKED_WITH_STREAM`)."""
        row = await conn.fetchrow(_sql.LOCKED_WITH_STREAM, approval_id)
        return None if row is None else _read(approval_id, row)


@dataclass(frozen=True, slots=True)
class Read:
    """An approval as a step on it reads it."""

    approval: Approval
    stream: list[Fact]  # empty when not asked for
    reviewer_groups: frozenset[str] | None  # None: not asked for, or not in the directory
    # What the deciding reviewer recorded under the request id asked about (None: not asked
    # for, or nothing): a retry of a request that was recorded.
    request_decision: DecisionKind | None
    now: datetime  # the server's clock when it was read: what a request is due by


def _read(approval_id: str, row: asyncpg.Record) -> Read:
    stream = stream_of(approval_id)
    entries = json.loads(row["stream"]) if row["stream"] is not None else []
    groups, earlier = row["reviewer_groups"], row["request_decision"]
    return Read(
        row_to_approval(row),
        [Fact(stream, v, t, d, a) for v, t, d, a in entries],
        None if groups is None else frozenset(groups),
        None if earlier is None else DecisionKind(earlier),
        row["server_now"],
    )
