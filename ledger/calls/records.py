"""The tool-call ledger's recorder: the rows and events of `call:<run>/<call id>` streams,
sealed values and recorded outcomes. What to do with a call is `ToolLedger`'s business; this
module only reads and writes what was decided, one statement per step.
"""

from __future__ import annotations

import json
from typing import Any

import asyncpg

from ..canonical import canonical_json
from ..errors import ResultTampered
from ..journal import NewEvent
from ..journal.projection import commit, grouped_writes
from ..keys import KeyRing
from ..keys.digests import matches, text_digest
from ..keys.values import open_value, seal_value
from ..store import Database
from . import _sql as sql
from .model import CallOutcome, CallRecord, CallStatus, call_record
from .projection import CALLS
from .tracing import writing, written

__all__ = ["CallRecorder", "open_call_value", "outcome_of"]


async def open_call_value(ring: KeyRing, stream_id: str, part: str, sealed: bytes) -> str:
    """Decrypt a call's sealed `args` or `result` (JSON text), bound to that call's stream."""
    return await open_value(ring, stream_id, part, sealed)


def outcome_of(record: CallRecord, value: Any, *, replayed: bool) -> CallOutcome:
    """The outcome a finished record stands for, given its (opened) result or error text."""
    returns_value = record.status in (CallStatus.SUCCEEDED, CallStatus.RESPONDED)
    return CallOutcome(
        status=record.status,
        call_id=record.call_id,
        result=value if returns_value else None,
        error=None if returns_value else str(value),
        replayed=replayed,
        attempts=record.attempts,
        approval_id=record.approval_id,
    )


class CallRecorder:
    """Reads and writes tool calls: rows, their streams, their sealed values."""

    def __init__(self, db: Database, ring: KeyRing, lease_seconds: float) -> None:
        self.db = db
        self.ring = ring
        self.lease_seconds = lease_seconds
        # Steps committed on their own: concurrent ones share a statement and a commit.
        self._grouped = grouped_writes(db, CALLS)

    def seal(self, stream_id: str, part: str, value: Any) -> tuple[bytes, str]:
        """Encrypt a JSON value bound to its call's stream; return it with its keyed digest."""
        text = canonical_json(value)
        return seal_value(self.ring, stream_id, part, text), text_digest(self.ring, text)

    async def insert(
        self,
        conn: asyncpg.Connection | None,
        stream_id: str,
        events: list[NewEvent],
        sealed_args: bytes,
        sealed_result: bytes | None,
        lease_token: bytes | None,
        tally: str,
    ) -> CallRecord | None:
        """Write a new call and its first events, in one statement (on `conn`, else committed on
        its own); None when the call (or, once per run, the tool) is in the ledger already.
        `lease_token`: the token of this worker's lease on a call that runs (None for one the
        approval settles); `tally`: what it adds to its run's history (`history.tally_of`).

        Raises:
            HistoryMoved: its policy counted the run's calls and more have started since."""
        writing()
        return await commit(
            self._grouped if conn is None else conn,
            CALLS,
            stream_id,
            None,
            events,
            expected_version=0,
            args_sealed=sealed_args,
            result_sealed=sealed_result,
            lease_seconds=self.lease_seconds,
            lease_token=lease_token,
            tally=tally,
            on_written=written,
        )

    async def advance(
        self,
        conn: asyncpg.Connection | None,
        record: CallRecord,
        events: list[NewEvent],
        sealed_result: bytes | None = None,
        *,
        lease_token: bytes | None = None,
    ) -> CallRecord | None:
        """Append `events` and write what they fold to, in one statement (on `conn`, else
        committed on its own), if the row is still at the version `record` holds; None
        otherwise. `lease_token`: the token of the lease this worker holds on the call (or
        takes, for a takeover); None for a settlement after the lease lapsed.

        Raises:
            LeaseHeld: the call is running under another worker's lease that has not lapsed.
        """
        writing()
        return await commit(
            self._grouped if conn is None else conn,
            CALLS,
            CALLS.stream_of(record),
            record,
            events,
            expected_version=record.version,
            result_sealed=sealed_result,
            lease_seconds=self.lease_seconds,
            lease_token=lease_token,
            on_written=written,
        )

    async def outcome(self, row: asyncpg.Record, *, replayed: bool) -> CallOutcome:
        """The outcome a row records, its result opened and checked against the journal's
        digest (under the key that digest names)."""
        record = call_record(row)
        if not record.status.final:
            return CallOutcome(
                record.status,
                record.call_id,
                replayed=replayed,
                attempts=record.attempts,
                approval_id=record.approval_id,
            )
        sealed = row["result_sealed"]
        if sealed is None:  # every outcome is recorded with its result: this one was removed
            raise ResultTampered(
                f"the stored result of {record.stream_id} is missing, though the journal "
                "records its digest"
            )
        text = await open_call_value(self.ring, record.stream_id, "result", sealed)
        digest = record.result_digest
        if digest is None or not await matches(self.ring, digest, text):
            raise ResultTampered(
                f"the stored result of {record.stream_id} does not match the digest in the journal"
            )
        return outcome_of(record, json.loads(text), replayed=replayed)

    async def renew(self, held: list[tuple[tuple[str, str], int, bytes]]) -> int:
        """Extend the leases of these calls ((run, call), version, lease token) in one
        statement; returns how many were renewed (a call taken over or finished is not)."""
        async with self.db.connection() as conn:
            renewed: int = await conn.fetchval(
                sql.RENEW,
                [run for (run, _), _, _ in held],
                [call for (_, call), _, _ in held],
                [version for _, version, _ in held],
                [token for _, _, token in held],
                self.lease_seconds,
            )
        return renewed
