"""The journal: every change to Signoff is an event appended here, and nothing else is truth.

Streams (`approval:<id>`, `call:<run>/<call id>`, ...) hold versioned, hash-chained events. Appends
name the version they expect; a lost race raises `VersionConflict` and writes nothing.

Global order. `read_all` orders events by (id of the appending transaction, position) and reads
only below the oldest transaction still running (`pg_snapshot_xmin`). Positions come from a
sequence at insert time, so a transaction can take position 10, commit after another took 11, and
a reader that had passed 11 would skip 10 forever. Transaction ids below the horizon are final: any
transaction that commits later has a larger id. So once read, the order never changes, and a reader
never skips an event. One long transaction anywhere on the cluster holds readers back; keep
transactions short.

Waking others. PostgreSQL holds one cluster-wide lock through each notifying commit's flush, so a
NOTIFY in every append would serialize commits. Appends notify only when asked (`notify=channel`),
for the few events someone waits on; tailing readers poll the horizon (`follow`).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from ..canonical import GENESIS_HASH, chain_hash, jcs_json, timed_event_bytes
from ..errors import InvalidEvent
from ..limits import INT4, INT8, int_problem
from ..store import Database
from ..store.batches import batches
from ..store.group import GroupedCalls
from . import _sql as sql
from . import reader
from .event import Event

__all__ = [
    "MAX_DATA_BYTES",
    "MAX_EVENTS_PER_APPEND",
    "Appended",
    "BadEvent",
    "Event",
    "Journal",
    "NewEvent",
    "VerifyReport",
]

MAX_DATA_BYTES = 256 * 1024
"""Largest canonical JSON payload of one event. Bulky values belong elsewhere (encrypted results
are stored beside their call, not in the journal)."""
MAX_EVENTS_PER_APPEND = 1000
_MAX_NAME = {"stream id": 200, "type": 100, "actor": 200}
_CHANNEL = re.compile(r"[a-z_][a-z0-9_]{0,62}")

# The columns of `Event`, in its order (`reader.EVENT_COLUMNS`); this name is kept for old imports.
_COLUMNS = sql.EVENT_COLUMNS
_VERIFY_BATCH = 5000


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event to append. `data` must be a JSON object; `actor` says who caused it."""

    type: str
    data: dict[str, Any]
    actor: str


@dataclass(frozen=True, slots=True)
class Appended:
    """What an append wrote: the stream's new version and each event's position."""

    stream_id: str
    version: int
    positions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class BadEvent:
    stream_id: str
    version: int
    position: int
    problem: str


@dataclass(frozen=True, slots=True)
class VerifyReport:
    events: int
    streams: int
    bad: tuple[BadEvent, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.bad

    @property
    def first_bad(self) -> BadEvent | None:
        """The bad event earliest in the journal (lowest position)."""
        return min(self.bad, key=lambda b: b.position) if self.bad else None


class Journal:
    """Append to and read the event journal of one database."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._appends = GroupedCalls(db, sql.APPEND_CALL)

    async def append(
        self,
        stream_id: str,
        events: Sequence[NewEvent],
        *,
        expected_version: int,
        notify: str | None = None,
        connection: asyncpg.Connection | None = None,
    ) -> Appended:
        """Append `events` to `stream_id`, which must be at `expected_version` (0: new stream).

        Args:
            notify: a channel to NOTIFY (payload: the stream id) when the append commits; only for
                events somebody waits on.
            connection: run inside this connection's open transaction instead of on its own.

        Raises:
            InvalidEvent: malformed input; nothing was written.
            VersionConflict: the stream is not at `expected_version`; nothing was written.
        """
        if notify is not None and not _CHANNEL.fullmatch(notify):
            raise InvalidEvent(f"not a notification channel name: {notify!r}")
        args = (*append_arguments(stream_id, events, expected_version), notify)
        if connection is None:  # committed on its own, in one statement with concurrent ones
            positions = await self._appends.call(stream_id, args)
        else:
            async with self.db.connection(connection) as conn:  # SG409: VersionConflict
                positions = await conn.fetchval(sql.APPEND, *args)
        return Appended(stream_id, expected_version + len(events), tuple(positions))

    async def stream_version(
        self, stream_id: str, *, connection: asyncpg.Connection | None = None
    ) -> int:
        """The version of the newest event in `stream_id` (0 when it has none)."""
        _check_name("stream id", stream_id)
        async with self.db.connection(connection) as conn:
            version: int = await conn.fetchval(sql.HEAD, stream_id)
        return version

    async def read_stream(
        self,
        stream_id: str,
        *,
        after_version: int = 0,
        connection: asyncpg.Connection | None = None,
    ) -> list[Event]:
        """The events of one stream, oldest first (in `connection`'s transaction when given)."""
        _check_name("stream id", stream_id)
        if (problem := int_problem(after_version, INT4)) is not None:
            raise InvalidEvent(f"after_version {problem}")
        async with self.db.connection(connection) as conn:
            return await reader.read_stream(conn, stream_id, after_version)

    async def read_all(self, *, after: int = 0, batch_size: int = 1000) -> AsyncIterator[Event]:
        """Every event after position `after` (0: from the start) in the global order, up to
        the events committed so far. Resume later with the last event's position.

        Raises:
            InvalidEvent: `after` is not the position of an event.
        """
        if (problem := int_problem(batch_size, (1, INT8[1]))) is not None:
            raise InvalidEvent(f"batch_size {problem}")
        cursor = await self._cursor_of(after)
        while True:
            async with self.db.connection() as conn:
                events = await reader.read_after(conn, cursor[0], cursor[1], batch_size)
            for event in events:
                yield event
            if len(events) < batch_size:
                return
            cursor = (events[-1].txid, events[-1].position)

    async def last_position(self) -> int:
        """The position of the last event `read_all` returns now (0: none yet); reading after
        it yields only what commits from here on."""
        async with self.db.connection() as conn:
            return await reader.last_read_position(conn)

    async def follow(self, *, after: int = 0, poll_interval: float = 0.05) -> AsyncIterator[Event]:
        """Like `read_all`, but never ends: waits `poll_interval` seconds for new events."""
        while True:
            async for event in self.read_all(after=after):
                after = event.position
                yield event
            await asyncio.sleep(poll_interval)

    async def verify(self, *, progress: Callable[[int], None] | None = None) -> VerifyReport:
        """Recompute every stream's hash chain; report the events that do not match.

        `progress(n)`, when given, is called as the check goes: n more events checked.
        """
        chains = _Chains()
        events = 0
        # Batches, not one `async for` step per row: the check itself is a few microseconds, and
        # the server reads the next batch meanwhile.
        async with (
            self.db.transaction() as conn,
            batches(conn, sql.VERIFY, size=_VERIFY_BATCH) as rows_of,
        ):
            async for rows in rows_of:
                chains.check(rows)
                events += len(rows)
                if progress is not None:
                    progress(len(rows))
        return VerifyReport(events, chains.streams, tuple(chains.bad))

    async def _cursor_of(self, position: int) -> tuple[int, int]:
        if int_problem(position, (0, INT8[1])) is not None:
            raise InvalidEvent(f"a journal position is a whole number from 0 to {INT8[1]}")
        if position == 0:
            return (0, 0)
        async with self.db.connection() as conn:
            txid = await reader.txid_of(conn, position)
        if txid is None:
            raise InvalidEvent(f"no event at position {position}")
        return (txid, position)


class _Chains:
    """Hash chains checked as their events come, in (stream, version) order."""

    def __init__(self) -> None:
        self.bad: list[BadEvent] = []
        self.streams = 0
        self.stream: str | None = None
        self.previous_hash, self.previous_version = GENESIS_HASH, 0

    def check(self, rows: list[asyncpg.Record]) -> None:
        """Check `_VERIFY` rows, the next ones in order (in locals: this runs for every event)."""
        bad, stream, streams = self.bad, self.stream, self.streams
        previous_hash, previous_version = self.previous_hash, self.previous_version
        for position, stream_id, version, type_, data, actor, at, stored, tag, login in rows:
            if stream_id != stream:
                stream, streams = stream_id, streams + 1
                previous_hash, previous_version = GENESIS_HASH, 0
            if version != previous_version + 1:
                problem: str | None = (
                    f"version {previous_version + 1} is missing before version {version}"
                )
            else:
                try:
                    canonical = timed_event_bytes(
                        stream_id, version, type_, actor, at, data, tag_version=tag, login=login
                    )
                except InvalidEvent as e:  # a tag version no code knows, or a login unfit
                    problem = str(e)
                else:
                    problem = _hash_problem(chain_hash(previous_hash, canonical), stored)
            if problem is not None:
                bad.append(BadEvent(stream_id, version, position, problem))
            # Chain from the stored hash, so one altered event is reported alone.
            previous_hash, previous_version = stored, version
        self.stream, self.streams = stream, streams
        self.previous_hash, self.previous_version = previous_hash, previous_version


def _check(event: Event, previous_hash: bytes, previous_version: int) -> str | None:
    if event.version != previous_version + 1:
        return f"version {previous_version + 1} is missing before version {event.version}"
    try:
        expected = chain_hash(previous_hash, event.canonical_bytes())
    except InvalidEvent as e:  # a tag version no code knows (altered, or from newer code),
        # or a login where its tag has none
        return str(e)
    return _hash_problem(expected, event.hash)


def _hash_problem(expected: bytes, stored: bytes) -> str | None:
    if expected != stored:
        return f"hash differs: stored {stored.hex()}, recomputed {expected.hex()}"
    return None


def append_arguments(
    stream_id: str, events: Sequence[NewEvent], expected_version: int
) -> tuple[str, int, list[str], list[str], list[str]]:
    """The first five arguments of `signoff_append` (all but the notify channel), in order;
    for the journal package's own statements (`Journal.append`, `projection.commit`), run through
    `Database.connection()`, where a stale version is `VersionConflict` too. The database sets
    each event's time, transaction id and login (who connected: the events name no login of
    the caller's) and computes its canonical bytes and hash; the data text is RFC 8785
    (`jcs_json`), what the database's tag version 3 says it is.

    Raises:
        InvalidEvent: malformed input.
    """
    _check_name("stream id", stream_id)
    if isinstance(expected_version, bool) or not isinstance(expected_version, int):
        raise InvalidEvent(f"expected_version must be an int, not {expected_version!r}")
    if expected_version < 0:
        raise InvalidEvent(f"expected_version must be >= 0, not {expected_version}")
    if not events:
        raise InvalidEvent("an append needs at least one event")
    if len(events) > MAX_EVENTS_PER_APPEND:
        raise InvalidEvent(f"at most {MAX_EVENTS_PER_APPEND} events per append, not {len(events)}")
    if expected_version + len(events) > INT4[1]:  # versions are an `integer` column
        raise InvalidEvent(f"a stream has at most {INT4[1]} versions; expected_version is too big")
    types, payloads, actors = [], [], []
    for event in events:
        if not isinstance(event, NewEvent):
            raise InvalidEvent(f"events are NewEvent values, not {type(event).__name__}")
        _check_name("type", event.type)
        _check_name("actor", event.actor)
        types.append(event.type)
        payloads.append(_payload(event))
        actors.append(event.actor)
    return (stream_id, expected_version, types, payloads, actors)


def _payload(event: NewEvent) -> str:
    if not isinstance(event.data, dict):
        raise InvalidEvent(
            f"event {event.type!r}: data must be a JSON object, not {type(event.data).__name__}"
        )
    try:
        text = jcs_json(event.data)
        size = len(text.encode("utf-8"))
    except (TypeError, ValueError) as e:  # UnicodeEncodeError is a ValueError
        raise InvalidEvent(f"event {event.type!r}: data is not JSON: {e}") from e
    if size > MAX_DATA_BYTES:
        raise InvalidEvent(
            f"event {event.type!r}: data is {size} bytes, more than the limit of {MAX_DATA_BYTES}"
        )
    return text


def _check_name(what: str, value: str) -> None:
    if not isinstance(value, str) or not value:
        raise InvalidEvent(f"{what} must be a non-empty string, not {value!r}")
    if len(value) > _MAX_NAME[what]:
        raise InvalidEvent(f"{what} is longer than {_MAX_NAME[what]} characters")
    if "\x00" in value or not value.isprintable():
        raise InvalidEvent(f"{what} {value!r} contains control characters")
