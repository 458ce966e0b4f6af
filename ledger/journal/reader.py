"""Reading the `events` table: the one module outside the journal's own writes that queries it,
for the journal, the audit modules, the CLI and the HTTP service's webhooks.

Every function takes the connection to read on, so that a caller reading in a snapshot of its own
(an auditor's repeatable-read transaction) gets every read in that snapshot. Events come back as
`Event`s, their columns in `EVENT_COLUMNS` order.

The global order is (transaction id, position) (see `ledger.journal.journal`): `read_after` and
`read_types` stop at the horizon, so that what they return never changes; `streams_after`,
`event_at` and `newest_position` do not, for readers that pin their own snapshot.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import asyncpg

from . import _sql as sql
from .event import Event

__all__ = [
    "EVENT_COLUMNS",
    "Event",
    "event_at",
    "last_read_position",
    "newest_position",
    "read_after",
    "read_stream",
    "read_streams",
    "read_streams_with_prefix",
    "read_types",
    "streams_after",
    "txid_of",
]

EVENT_COLUMNS = sql.EVENT_COLUMNS
"""The columns of `events` that make an `Event`, in the order of its fields (for a view or a
query of your own that must yield `Event(*row)`)."""


async def read_stream(
    conn: asyncpg.Connection, stream_id: str, after_version: int = 0
) -> list[Event]:
    """The events of one stream after `after_version`, oldest first."""
    return [Event(*row) for row in await conn.fetch(sql.READ_STREAM, stream_id, after_version)]


async def read_streams(conn: asyncpg.Connection, stream_ids: Sequence[str]) -> list[Event]:
    """The events of `stream_ids`, stream by stream (in id order), each oldest first."""
    return [Event(*row) for row in await conn.fetch(sql.READ_STREAMS, list(stream_ids))]


async def read_streams_with_prefix(
    conn: asyncpg.Connection, prefix: str, *, prefetch: int = 5000
) -> AsyncIterator[Event]:
    """The events of every stream whose id starts with `prefix`, stream by stream, each oldest
    first; a server-side cursor, so `conn` must be in a transaction."""
    async for row in conn.cursor(sql.READ_PREFIX, prefix, prefetch=prefetch):
        yield Event(*row)


async def read_after(conn: asyncpg.Connection, txid: int, position: int, limit: int) -> list[Event]:
    """Up to `limit` events after (`txid`, `position`) in the global order, below the horizon
    ((0, 0): from the start)."""
    return [Event(*row) for row in await conn.fetch(sql.READ_ALL, str(txid), position, limit)]


async def read_types(
    conn: asyncpg.Connection,
    types: Sequence[str],
    *,
    after: tuple[int, int] = (0, 0),
    limit: int = 1000,
) -> list[Event]:
    """Up to `limit` events of `types` after the place `after` (transaction id, position) in the
    global order, below the horizon. Resume with the last one's (`txid`, `position`)."""
    rows = await conn.fetch(sql.READ_TYPES, str(after[0]), after[1], limit, list(types))
    return [Event(*row) for row in rows]


async def streams_after(conn: asyncpg.Connection, txid: int, position: int) -> AsyncIterator[str]:
    """The stream of each event after (`txid`, `position`) in the global order, one per event,
    committed ones in `conn`'s snapshot (not only those below the horizon); a server-side
    cursor, so `conn` must be in a transaction."""
    async for (stream_id,) in conn.cursor(sql.STREAMS_AFTER, str(txid), position):
        yield stream_id


async def event_at(conn: asyncpg.Connection, position: int) -> Event | None:
    """The event at `position`, or None."""
    row = await conn.fetchrow(sql.EVENT_AT, position)
    return None if row is None else Event(*row)


async def txid_of(conn: asyncpg.Connection, position: int) -> int | None:
    """The transaction id of the event at `position` (its place in the global order), or None."""
    txid: str | None = await conn.fetchval(sql.TXID_OF, position)
    return None if txid is None else int(txid)


async def last_read_position(conn: asyncpg.Connection) -> int:
    """The position of the last event below the horizon in the global order (0: none)."""
    position: int | None = await conn.fetchval(sql.LAST_READ)
    return position or 0


async def newest_position(conn: asyncpg.Connection) -> int:
    """The largest position handed out so far, committed or not (0: none): about how many events
    the journal holds (positions have gaps), for a progress bar's total."""
    position: int | None = await conn.fetchval(sql.NEWEST_POSITION)
    return position or 0
