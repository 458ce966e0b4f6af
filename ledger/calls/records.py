"""The tool-call ledger's recorder: the rows and events of `call:<run>/<call id>` streams,
sealed values and recorded outcomes. What to do with a call is `ToolLedger`'s business; this
module only reads and writes what was decided, one statement per step.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from typing import Any

import asyncpg

from ..canonical import canonical_json, json_digest
from ..errors import ResultTampered
from ..journal.journal import NewEvent, append_arguments
from ..keys import KeyRing, Purpose
from ..store import Database
from . import _sql as sql
from .model import (
    CallOutcome,
    CallRecord,
    CallStatus,
    apply_call_event,
    call_record,
    call_stream,
)

__all__ = ["CallRecorder", "fold", "open_call_value", "outcome_of"]


def fold(
    record: CallRecord | None, events: list[NewEvent], run_id: str, call_id: str
) -> CallRecord:
    """The call after `events` (its next events, in order)."""
    version = 0 if record is None else record.version
    for event in events:
        version += 1
        record = apply_call_event(record, run_id, call_id, version, event.type, event.data)
    if record is None:
        raise ValueError("a tool-call step needs at least one event")
    return record


async def open_call_value(
    ring: KeyRing, run_id: str, call_id: str, part: str, sealed: bytes
) -> str:
    """Decrypt a call's sealed `args` or `result` (JSON text), bound to that call."""
    context = f"{call_stream(run_id, call_id)}:{part}"
    return (await ring.decrypt_fresh(Purpose.RESULT, sealed, context.encode(), context)).decode()


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

    def seal(self, run_id: str, call_id: str, part: str, value: Any) -> tuple[bytes, str]:
        """Encrypt a JSON value bound to its call; return it with its digest."""
        text = canonical_json(value)
        context = f"{call_stream(run_id, call_id)}:{part}".encode()
        digest = hashlib.sha256(text.encode()).hexdigest()
        return self.ring.encrypt(Purpose.RESULT, text.encode(), context), digest

    async def insert(
        self,
        conn: asyncpg.Connection,
        record: CallRecord,
        events: list[NewEvent],
        sealed_args: bytes,
        sealed_result: bytes | None,
    ) -> bool:
        """Write a new call and its first events; False when the call (or, once per run, the
        tool) is in the ledger already."""
        inserted = await conn.fetchval(
            sql.START,
            record.run_id,
            record.call_id,
            record.tool,
            record.effect,
            record.once_per_run,
            record.request_digest,
            record.args_digest,
            sealed_args,
            record.idempotency_key,
            record.approval_id,
            record.status,
            record.worker_id,
            self.lease_seconds,
            record.result_digest,
            sealed_result,
            record.started_at,
            record.finished_at,
            record.version,
            *append_arguments(call_stream(record.run_id, record.call_id), events, 0),
            list(record.approved_by),
            record.approval_stream,
        )
        return inserted is not None

    async def advance(
        self,
        conn: asyncpg.Connection,
        record: CallRecord,
        events: list[NewEvent],
        sealed_result: bytes | None = None,
    ) -> CallRecord | None:
        """Append `events` and write what they fold to, if the row is still at the version
        `record` holds; None otherwise."""
        new = fold(record, events, record.run_id, record.call_id)
        moved = await conn.fetchrow(
            sql.ADVANCE,
            new.run_id,
            new.call_id,
            new.status,
            new.attempts,
            new.worker_id,
            self.lease_seconds,
            new.result_digest,
            sealed_result,
            new.resolved_by,
            new.finished_at,
            new.version,
            record.version,
            *append_arguments(call_stream(new.run_id, new.call_id), events, record.version),
        )
        return None if moved is None else new

    async def advance_alone(
        self, record: CallRecord, event: NewEvent, sealed: bytes
    ) -> CallRecord | None:
        """`advance` on a connection of its own."""
        async with self.db.connection() as conn:
            return await self.advance(conn, record, [event], sealed)

    async def outcome(self, row: asyncpg.Record, *, replayed: bool) -> CallOutcome:
        """The outcome a row records, its result opened and checked against the journal's
        digest."""
        record = call_record(row)
        if not record.status.final:
            return CallOutcome(
                record.status,
                record.call_id,
                replayed=replayed,
                attempts=record.attempts,
                approval_id=record.approval_id,
            )
        text = await open_call_value(
            self.ring, record.run_id, record.call_id, "result", row["result_sealed"]
        )
        value = json.loads(text)
        if json_digest(value) != record.result_digest:
            raise ResultTampered(
                f"the stored result of {call_stream(record.run_id, record.call_id)} does not "
                "match the digest in the journal"
            )
        return outcome_of(record, value, replayed=replayed)

    async def renew(self, held: list[tuple[tuple[str, str], int]]) -> None:
        """Extend the leases of these calls ((run, call) -> version) in one statement."""
        async with self.db.connection() as conn:
            await conn.execute(
                sql.RENEW,
                [run for (run, _), _ in held],
                [call for (_, call), _ in held],
                [version for _, version in held],
                self.lease_seconds,
            )

    async def verify_projection(self) -> list[str]:
        """Rebuild every call from its stream and compare with the `tool_calls` table; return
        the differences (none when the projection is true to the journal).

        Calls started before `call.started` recorded who approved them (schema 0005) have
        `approved_by` and `approval_stream` filled in by that migration from the approval they
        consumed, which their own streams cannot confirm: for those calls the two are left out
        of the comparison (the approval's stream is their evidence). The migration appends
        nothing: the journal is history and a new event would bump the version a running
        call's worker is fenced by."""
        rebuilt: dict[tuple[str, str], CallRecord] = {}
        keys: dict[str, tuple[str, str]] = {}  # stream -> (run, call), from call.started
        unrecorded: set[tuple[str, str]] = set()  # started without saying who approved
        async with self.db.transaction() as conn:
            for row in await conn.fetch(sql.STREAM_EVENTS):
                data = json.loads(row["data"])
                if row["version"] == 1:
                    keys[row["stream_id"]] = (data["run_id"], data["call_id"])
                    if "approved_by" not in data:
                        unrecorded.add(keys[row["stream_id"]])
                key = keys.get(row["stream_id"])
                if key is None:
                    return [f"{row['stream_id']}: events before call.started"]
                rebuilt[key] = apply_call_event(
                    rebuilt.get(key), key[0], key[1], row["version"], row["type"], data
                )
            live = {(r["run_id"], r["call_id"]): call_record(r) for r in await conn.fetch(sql.ALL)}
        for k in unrecorded & live.keys():
            live[k] = replace(live[k], approved_by=(), approval_stream=None)
        problems = [f"{k}: in the table, not in the journal" for k in live.keys() - rebuilt.keys()]
        problems += [f"{k}: in the journal, not in the table" for k in rebuilt.keys() - live.keys()]
        problems += [
            f"{k}: table {live[k]} != journal {rebuilt[k]}"
            for k in live.keys() & rebuilt.keys()
            if live[k] != rebuilt[k]
        ]
        return problems
