"""The approval store's recorder: the `approvals` projection's rows and streams, and the sealed
arguments, edits and answers. What a decision may do is `ApprovalStore`'s business.
"""

from __future__ import annotations

import json

import asyncpg

from ledger.errors import VersionConflict
from ledger.journal import NewEvent
from ledger.journal.projection import Fact, commit
from ledger.keys import KeyRing
from ledger.keys.values import as_text, from_text, open_value, seal_value
from ledger.store import Database

from . import _sql
from .integrity import mac_events
from .model import Approval
from .projection import APPROVALS, NOTIFY_CHANNEL, row_to_approval, stream_of

__all__ = ["NOTIFY_CHANNEL", "ApprovalRecorder", "row_to_approval"]


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
        transaction. None when a new request lost the race to an identical one. Every event
        but a reviewer's signed decision is MACed here (`integrity.mac_events`)."""
        base = 0 if state is None else state.version
        stream = stream_of(approval_id)
        binding = events[0].data["binding"] if state is None else state.binding
        events = mac_events(self.ring, binding, stream, base, events)
        approval = await commit(conn, APPROVALS, stream, state, events, expected_version=base)
        if approval is None and state is not None:
            # Callers hold the row lock, so this means a bug, not a race: nothing was written.
            raise VersionConflict(stream, state.version, None)
        return approval

    def seal(self, text: str, approval_id: str, part: str) -> str:
        """`text` sealed to this approval's `part`, as event JSON holds it."""
        return as_text(seal_value(self.ring, stream_of(approval_id), part, text))

    async def open(self, sealed: str, approval_id: str, part: str) -> str:
        return await open_value(self.ring, stream_of(approval_id), part, from_text(sealed))

    async def locked(self, conn: asyncpg.Connection, approval_id: str) -> Approval | None:
        """The approval, its row locked until `conn`'s transaction ends; None if unknown."""
        row = await conn.fetchrow(_sql.BY_ID_FOR_UPDATE, approval_id)
        return None if row is None else row_to_approval(row)

    async def locked_with_stream(
        self, conn: asyncpg.Connection, approval_id: str
    ) -> tuple[Approval, list[Fact]] | None:
        """`locked`, with the approval's stream as the same statement read it (its snapshot
        may be older than the locked row: `_sql.BY_ID_FOR_UPDATE_WITH_STREAM`)."""
        row = await conn.fetchrow(_sql.BY_ID_FOR_UPDATE_WITH_STREAM, approval_id)
        if row is None:
            return None
        stream = stream_of(approval_id)
        entries = json.loads(row["stream"]) if row["stream"] is not None else []
        return row_to_approval(row), [Fact(stream, v, t, d, a) for v, t, d, a in entries]
