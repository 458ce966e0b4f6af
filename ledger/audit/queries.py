"""What auditors ask of the tool-call ledger: which calls ran, and the whole story of one.

Reading a call's arguments or result in clear (`reveal`) is itself recorded in the journal
(stream `reveal:<run>/<call>`), so the audit trail shows who looked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..calls.model import CallRecord, CallStatus, call_record, call_stream
from ..calls.records import open_call_value
from ..errors import ConfigurationError, InvalidEvent, UnknownCall, VersionConflict
from ..journal import Event, Journal, NewEvent
from ..keys import KeyRing
from ..limits import name_problem
from ..store import Database

__all__ = ["CallFilter", "CallStory", "call_story", "find_calls", "record_reveal"]

_FIND = """
SELECT c.run_id, c.call_id, c.tool, c.effect, c.once_per_run, c.request_digest, c.args_digest,
       c.idempotency_key, c.approval_id, c.status, c.attempts, c.worker_id, c.started_at,
       c.finished_at, c.result_digest, c.resolved_by, c.version,
       CASE WHEN a.status IN ('approved', 'edited') THEN a.decided_by END AS decided_by
FROM tool_calls c LEFT JOIN approvals a ON a.approval_id = c.approval_id
WHERE ($1::text IS NULL OR c.run_id = $1)
  AND ($2::text IS NULL OR c.tool = $2)
  AND ($3::text IS NULL OR c.status = $3)
  AND ($4::timestamptz IS NULL OR c.started_at >= $4)
  AND ($5::timestamptz IS NULL OR c.started_at < $5)
  AND ($6::text IS NULL OR (a.status IN ('approved', 'edited')
       AND $6 = ANY(string_to_array(a.decided_by, ','))))
  AND ($8::text IS NULL OR c.call_id = $8)
ORDER BY c.started_at, c.run_id, c.call_id
LIMIT $7
"""

_SEALED = "SELECT args_sealed, result_sealed FROM tool_calls WHERE run_id = $1 AND call_id = $2"


@dataclass(frozen=True)
class CallFilter:
    run_id: str | None = None
    tool: str | None = None
    status: CallStatus | None = None
    since: datetime | None = None
    until: datetime | None = None
    approved_by: str | None = None
    call_id: str | None = None
    limit: int = 1000


@dataclass(frozen=True)
class CallStory:
    """A call and everything recorded about it: its events, its approval's events, and (when
    revealed) its arguments and result."""

    call: CallRecord
    approved_by: str | None
    events: list[Event]
    approval_events: list[Event]
    args: dict[str, Any] | None = None
    result: Any = None


async def find_calls(db: Database, where: CallFilter) -> list[tuple[CallRecord, str | None]]:
    """Calls matching `where`, oldest first, each with who approved it (if anyone)."""
    async with db.connection() as conn:
        rows = await conn.fetch(
            _FIND,
            where.run_id,
            where.tool,
            where.status,
            where.since,
            where.until,
            where.approved_by,
            where.limit,
            where.call_id,
        )
    return [(call_record(row), row["decided_by"]) for row in rows]


async def call_story(
    db: Database,
    run_id: str,
    call_id: str,
    *,
    reveal_by: str | None = None,
    ring: KeyRing | None = None,
) -> CallStory:
    """The whole story of one call. With `reveal_by` (and the key ring), its arguments and
    result in clear, and an event recording who revealed them.

    Raises:
        UnknownCall: no such call.
    """
    found = await find_calls(db, CallFilter(run_id=run_id, call_id=call_id, limit=1))
    if not found:
        raise UnknownCall(run_id, call_id)
    call, approved_by = found[0]
    journal = Journal(db)
    events = await journal.read_stream(call_stream(run_id, call_id))
    approval_events = (
        await journal.read_stream(f"approval:{call.approval_id}") if call.approval_id else []
    )
    story = CallStory(call, approved_by, events, approval_events)
    if reveal_by is None:
        return story
    if ring is None:
        raise ConfigurationError("revealing needs the key ring")
    await ring.fresh()
    await record_reveal(db, f"reveal:{run_id}/{call_id}", reveal_by, run_id=run_id, call_id=call_id)
    async with db.connection() as conn:
        sealed = await conn.fetchrow(_SEALED, run_id, call_id)
    args = json.loads(await open_call_value(ring, run_id, call_id, "args", sealed["args_sealed"]))
    result = None
    if sealed["result_sealed"] is not None:
        text = await open_call_value(ring, run_id, call_id, "result", sealed["result_sealed"])
        result = json.loads(text)
    return CallStory(call, approved_by, events, approval_events, args, result)


async def record_reveal(db: Database, stream: str, by: str, **what: str) -> None:
    """Record in the journal that `by` read something sealed, in clear. Reveals of the same
    thing at once take turns: the loser of a version race appends after the winner."""
    if problem := name_problem(by, 200):
        raise InvalidEvent(f"who reveals {problem}")
    journal = Journal(db)
    data = {**what, "at": datetime.now(UTC).isoformat()}
    version = 0
    for _ in range(10):
        version = await journal.stream_version(stream)
        try:
            await journal.append(
                stream, [NewEvent("ledger.revealed", data, actor=by)], expected_version=version
            )
            return
        except VersionConflict:
            continue
    raise VersionConflict(stream, version, None)
