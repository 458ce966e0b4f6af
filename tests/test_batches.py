"""Reading many rows in batches (`ledger.store.batches`): every row once, in order, and the next
batch already on its way while the caller works on this one."""

from __future__ import annotations

import asyncio

from ledger.store import Database
from ledger.store.batches import batches

# Row 3 keeps the server busy (pg_sleep) until the client reads it, or for 30 s.
_SLOW_THIRD = """
SELECT g, CASE WHEN g = 3 THEN pg_sleep_for('30 seconds') END
FROM generate_series(1, 4) AS g
"""


async def test_every_row_comes_once_in_order_in_batches_of_the_size_asked(db: Database) -> None:
    async with (
        db.transaction() as conn,
        batches(conn, "SELECT generate_series(1, $1)", 7, size=3) as rows_of,
    ):
        got = [[r[0] for r in rows] async for rows in rows_of]
    assert got == [[1, 2, 3], [4, 5, 6], [7]]


async def test_the_server_reads_the_next_batch_while_the_caller_holds_this_one(
    db: Database,
) -> None:
    async with db.connection() as conn:
        transaction = conn.transaction()
        await transaction.start()
        pid = await conn.fetchval("SELECT pg_backend_pid()")
        async with batches(conn, _SLOW_THIRD, size=2) as rows_of:
            first = await anext(aiter(rows_of))
            assert [r[0] for r in first] == [1, 2]
            # Holding the first batch, the server is already computing the second (row 3).
            async with db.connection() as watcher:
                waiting = None
                for _ in range(100):
                    waiting = await watcher.fetchval(
                        "SELECT wait_event FROM pg_stat_activity WHERE pid = $1", pid
                    )
                    if waiting == "PgSleep":
                        break
                    await asyncio.sleep(0.05)
                await watcher.fetchval("SELECT pg_cancel_backend($1)", pid)  # end the sleep
        # Leaving waited for the cancelled batch; the transaction it aborted rolls back.
        await transaction.rollback()
    assert waiting == "PgSleep"


async def test_a_caller_that_stops_early_leaves_the_connection_usable(db: Database) -> None:
    async with db.transaction() as conn:
        async with batches(conn, "SELECT generate_series(1, 100)", size=10) as rows_of:
            async for rows in rows_of:
                assert len(rows) == 10
                break
        assert await conn.fetchval("SELECT 1") == 1
