"""Reading many rows: batches through a cursor, the next one on its way while the caller works.

A cursor read with `async for` (asyncpg's `prefetch`) asks for the next batch only when the
last row of this one is consumed: the server waits while the client works, then the client
waits while the server reads. `batches` asks for the next batch before it hands this one over,
so on a machine with a core to spare the server reads and sends while the client checks
(`ledger verify` ran 1.03 to 1.55 times as fast, alternated runs on 2 cores).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

__all__ = ["batches"]


@asynccontextmanager
async def batches(
    conn: asyncpg.Connection, query: str, *args: Any, size: int
) -> AsyncIterator[AsyncIterator[list[asyncpg.Record]]]:
    """The rows of `query` in lists of at most `size`, read through a cursor in `conn`'s open
    transaction: `async with batches(...) as rows_of: async for rows in rows_of: ...`.

    A context, not a bare generator: a batch may still be on its way when the caller stops
    (a `break`, an error), and the connection is free again only once it has arrived; leaving
    the `async with` waits for it."""
    cursor = await conn.cursor(query, *args)
    pending: asyncio.Future[list[asyncpg.Record]] | None = None

    async def read() -> AsyncGenerator[list[asyncpg.Record], None]:
        nonlocal pending
        pending = asyncio.ensure_future(cursor.fetch(size))
        while rows := await pending:
            pending = asyncio.ensure_future(cursor.fetch(size))
            await asyncio.sleep(0)  # the request goes out before the caller holds the loop
            yield rows

    reader = read()
    try:
        yield reader
    finally:
        await reader.aclose()  # stopped at a `yield` or done: nothing of it runs
        if pending is not None:
            # Its error, if any, is the transaction's to report on its next statement.
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await pending
