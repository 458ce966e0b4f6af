"""Projections: tables that are folds over journal streams, written in the same statement as
the events they fold.

A `Projection` says, for one kind of stream (`approval:<id>`, `call:<run>/<call id>`), how one
event changes its record (`apply`, pure), how a record maps to its table row and back, and
which database function writes the row. Everything else is here, once:

- `fold`: the record a sequence of events makes (the live write and the rebuild use it alike,
  so a rebuild equals the live table by construction);
- `commit`: one statement, the projection's write function, that writes the row and appends
  the events (the row first, fenced by its own conflict rule or by the version the caller
  read; the append after it, with the rights of the login checked there). A lost race writes
  neither;
- `verify_projection` (`check_projection` with counts): rebuild every row from the journal and
  name the rows that differ;
- `disagreement`: the fields in which one live row differs from the fold of its stream, for
  callers that must not act on a row its stream does not confirm.
"""

from __future__ import annotations

import dataclasses
import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from typing import Any, ClassVar, Generic, TypeVar

import asyncpg

from ..errors import InvalidEvent, ProjectionError
from ..store import Database
from ..store.group import GroupedCalls
from .journal import _CHANNEL, NewEvent, append_arguments

__all__ = [
    "Fact",
    "Projection",
    "ProjectionCheck",
    "check_projection",
    "check_projection_streams",
    "commit",
    "disagreement",
    "facts",
    "fold",
    "verify_projection",
]

R = TypeVar("R")

_PREFIX = re.compile(r"[a-z]+:")


@dataclass(frozen=True, slots=True)
class Fact:
    """An event as a fold sees it: where it is and what it says."""

    stream_id: str
    version: int
    type: str
    data: dict[str, Any]
    actor: str


class Projection(ABC, Generic[R]):
    """One table folded from the streams that start with `stream_prefix`.

    The database writes the row, in `write_function` (a migration's SECURITY DEFINER function
    that checks the row against its events and appends them): `commit` hands it whether the row
    is new, the row, then the `extras` the caller passes by name (values kept outside the
    record, such as ciphertexts), then the events. The row is the `row_parameters` columns of
    `to_row`, one typed parameter each, when the function takes them so (decoding them costs
    the server less than a JSON row), else one JSON object."""

    table: ClassVar[str]
    key: ClassVar[tuple[str, ...]]  # the primary key's columns
    stream_prefix: ClassVar[str]
    columns: ClassVar[str]  # the SELECT list `from_row` reads
    write_function: ClassVar[str]
    row_parameters: ClassVar[tuple[str, ...]] = ()
    extras: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def stream_of(self, record: R) -> str:
        """The stream a record is the fold of."""

    def label(self, record: R) -> str:
        """How `verify_projection` names a record."""
        return self.stream_of(record)

    @abstractmethod
    def apply(self, record: R | None, event: Fact) -> R:
        """The record after one more event of its stream (None: before its first event).

        Raises:
            ProjectionError: an event before the stream's first event;
            UnknownEventType: an event type this projection has no rule for.
        """

    @abstractmethod
    def from_row(self, row: Mapping[str, Any]) -> R:
        """A table row as a record."""

    @abstractmethod
    def to_row(self, record: R) -> dict[str, Any]:
        """A record as the values of its row, by column."""

    def notify(self, before: R | None, after: R) -> str | None:
        """The channel to NOTIFY when this step commits (None: nobody waits for it)."""
        return None

    def rows_of(self, stream_ids: Sequence[str]) -> tuple[str, tuple[Any, ...]]:
        """An SQL condition on the table selecting (at least) the rows of these streams, and
        its arguments ($1...): by default the first key column is the stream id less the
        prefix. Rows it selects of other streams are dropped."""
        keys = [s.removeprefix(self.stream_prefix) for s in stream_ids]
        return f"{self.key[0]} = ANY($1::text[])", (keys,)


def fold(projection: Projection[R], events: Iterable[Fact], record: R | None = None) -> R:
    """The record `events` make, starting from `record` (None: a stream's first events).

    Raises:
        ProjectionError: the events do not fold (one before the first, an unknown type, or
            data the rule cannot read: a field missing or of the wrong kind).
    """
    for event in events:
        record = _applied(projection, record, event)
    if record is None:
        raise ProjectionError(projection.stream_prefix, "no events to fold")
    return record


def facts(stream_id: str, events: Sequence[NewEvent], after_version: int = 0) -> Iterable[Fact]:
    """Events about to be appended to `stream_id` (now at `after_version`), as a fold sees them."""
    for version, event in enumerate(events, start=after_version + 1):
        yield Fact(stream_id, version, event.type, event.data, event.actor)


async def commit(
    conn: asyncpg.Connection | GroupedCalls,
    projection: Projection[R],
    stream_id: str,
    record: R | None,
    events: Sequence[NewEvent],
    *,
    expected_version: int,
    on_written: Callable[[Any], None] | None = None,
    **values: Any,
) -> R | None:
    """Append `events` to `stream_id` and write the row they fold `record` to, in one statement:
    on `conn`, or committed on its own, with concurrent steps, through `conn` when it is the
    projection's `grouped_writes`.

    `record` is the row as the caller read it (None: a new row), at `expected_version`.
    `values` are the projection's `extras`, by name (one not given is NULL). `on_written` is
    given what the write function returned, once it wrote (what it returns is the projection's
    to say).

    Returns:
        The new record; None when nothing was written: a new row met a conflict (for example
        an identical request, which the caller then reads), or an existing row has moved on
        from `expected_version`.

    Raises:
        InvalidEvent: malformed events; nothing was written.
        ProjectionError, UnknownEventType: the events do not fold onto `record`.
        VersionConflict: the stream has moved on though the row had not; nothing was written.
    """
    arguments = append_arguments(stream_id, events, expected_version)
    new = fold(projection, facts(stream_id, events, expected_version), record)
    channel = projection.notify(record, new)
    if channel is not None and not _CHANNEL.fullmatch(channel):
        raise InvalidEvent(f"not a notification channel name: {channel!r}")
    extras = tuple(values.get(name) for name in projection.extras)
    row = projection.to_row(new)
    if projection.row_parameters:
        fields = tuple(row[name] for name in projection.row_parameters)
    else:
        fields = (json.dumps(row, default=_json_default, ensure_ascii=False),)
    parameters = (record is None, *fields, *extras, *arguments, channel)
    # A stale version (SG409) leaves the caller's `Database.connection()` as VersionConflict.
    if isinstance(conn, GroupedCalls):
        written = await conn.call(stream_id, parameters)
    else:
        written = await conn.fetchval(_statement(type(projection)), *parameters)
    if written is None:
        return None
    if on_written is not None:
        on_written(written)
    return new


def grouped_writes(db: Database, projection: Projection[Any]) -> GroupedCalls:
    """The projection's write function, for steps committed on their own (`commit`)."""
    return GroupedCalls(db, _call(type(projection)))


@cache
def _statement(projection: type[Projection[Any]]) -> str:
    return f"SELECT {_call(projection)}"


@cache
def _call(projection: type[Projection[Any]]) -> str:
    """The call of a projection's write function, its parameters numbered from $1."""
    row = len(projection.row_parameters) or 1
    count = 1 + row + len(projection.extras) + 6
    placeholders = ", ".join(f"${i}" for i in range(1, count + 1))
    call = f"{projection.write_function}({placeholders})"
    return call if projection.row_parameters else call.replace("$2,", "$2::jsonb,", 1)


def _applied(projection: Projection[R], record: R | None, event: Fact) -> R:
    """`projection.apply`, with data it cannot read (anybody may have written it) reported as
    the stream's problem rather than escaping as a KeyError."""
    try:
        return projection.apply(record, event)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        if isinstance(e, ProjectionError):
            raise
        raise ProjectionError(
            event.stream_id, f"version {event.version}: unreadable {event.type}: {e!r}"
        ) from e


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"not a row value: {type(value).__name__}")


def disagreement(projection: Projection[R], live: R, events: Sequence[Fact]) -> tuple[str, ...]:
    """The fields in which `live` (a row as read) differs from the fold of its stream's
    `events`; () when the stream confirms it. A stream that does not fold (no events, an unknown
    type) confirms nothing: ("stream",)."""
    try:
        rebuilt = fold(projection, events)
    except ProjectionError:
        return ("stream",)
    if live == rebuilt:
        return ()
    if not (dataclasses.is_dataclass(live) and dataclasses.is_dataclass(rebuilt)):
        return ("record",)
    return tuple(
        f.name
        for f in dataclasses.fields(live)
        if getattr(live, f.name) != getattr(rebuilt, f.name, None)
    )


@dataclass(frozen=True, slots=True)
class ProjectionCheck:
    """What `check_projection` compared: the table's rows, the streams rebuilt, the problems."""

    table: str
    rows: int
    streams: int
    problems: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.problems


async def verify_projection(db: Database, projection: Projection[Any]) -> list[str]:
    """Rebuild every row of the projection from the journal and compare with its table; return
    the differences (none when the table is true to the journal)."""
    return list((await check_projection(db, projection)).problems)


async def check_projection(db: Database, projection: Projection[Any]) -> ProjectionCheck:
    """`verify_projection`, with how many rows and streams were compared."""
    if not _PREFIX.fullmatch(projection.stream_prefix):
        raise ValueError(f"not a stream prefix: {projection.stream_prefix!r}")
    # One snapshot for both reads: a commit between them would look like a difference.
    async with (
        db.connection() as conn,
        conn.transaction(isolation="repeatable_read", readonly=True),
    ):
        events = await conn.fetch(
            "SELECT stream_id, version, type, data::text AS data, actor FROM events"
            f" WHERE stream_id LIKE '{projection.stream_prefix}%' ORDER BY stream_id, version"
        )
        rows = await conn.fetch(f"SELECT {projection.columns} FROM {projection.table}")
    facts_read = (
        Fact(r["stream_id"], r["version"], r["type"], _json(r["data"]), r["actor"]) for r in events
    )
    streams, problems = _compare(projection, facts_read, rows)
    return ProjectionCheck(projection.table, len(rows), streams, tuple(problems))


async def check_projection_streams(
    conn: asyncpg.Connection, projection: Projection[Any], events: Sequence[Fact]
) -> ProjectionCheck:
    """`check_projection` for just the streams of `events` (whole streams, ordered by stream
    and version, all under the projection's prefix): their rows (`Projection.rows_of`) against
    their fold, in `conn`'s transaction. Rows of other streams are not read, so a row with no
    stream at all is for `check_projection` to find."""
    streams = sorted({e.stream_id for e in events})
    condition, args = projection.rows_of(streams)
    rows = await conn.fetch(
        f"SELECT {projection.columns} FROM {projection.table} WHERE {condition}", *args
    )
    mine = set(streams)
    rows = [r for r in rows if projection.stream_of(projection.from_row(r)) in mine]
    count, problems = _compare(projection, events, rows)
    return ProjectionCheck(projection.table, len(rows), count, tuple(problems))


def _compare(
    projection: Projection[Any], events: Iterable[Fact], rows: Sequence[Mapping[str, Any]]
) -> tuple[int, list[str]]:
    """Fold `events` (ordered by stream and version) and compare with `rows`; return how many
    streams were rebuilt and the differences."""
    rebuilt: dict[str, Any] = {}
    problems: list[str] = []
    broken: set[str] = set()
    for fact in events:
        stream = fact.stream_id
        if stream in broken:
            continue
        try:
            rebuilt[stream] = _applied(projection, rebuilt.get(stream), fact)
        except ProjectionError as e:
            broken.add(stream)
            rebuilt.pop(stream, None)
            problems.append(f"{stream} (version {fact.version}): {e}")
    live = {projection.stream_of(r): r for r in map(projection.from_row, rows)}
    label = projection.label
    problems += [
        f"{label(live[s])}: in the table, not in the journal"
        for s in sorted(live.keys() - rebuilt.keys() - broken)
    ]
    problems += [
        f"{label(rebuilt[s])}: in the journal, not in the table"
        for s in sorted(rebuilt.keys() - live.keys())
    ]
    for s in sorted(live.keys() & rebuilt.keys()):
        if live[s] != rebuilt[s]:
            problems.append(f"{label(live[s])}: table {live[s]} != journal {rebuilt[s]}")
    return len(rebuilt) + len(broken), problems


def _json(text: str) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(text)
    return value
