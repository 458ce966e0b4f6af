"""What the server's other sessions are doing (`pg_stat_activity`), for tests that must wait
until another task or process has reached a state before they go on."""

from __future__ import annotations

import asyncpg

__all__ = ["blocked_by", "finished", "listeners", "running"]


async def listeners(conn: asyncpg.Connection, channel: str) -> int:
    """The sessions on this database whose last statement was LISTEN on `channel`: a waiter
    that listens sits idle after it."""
    count: int = await conn.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND state = 'idle' AND query = $1",
        f'LISTEN "{channel}"',
    )
    return count


async def blocked_by(conn: asyncpg.Connection, pid: int) -> bool:
    """Whether a session waits for a lock that the session `pid` holds."""
    waits: bool = await conn.fetchval(
        "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid)))", pid
    )
    return waits


async def running(conn: asyncpg.Connection, pid: int, query_start: str) -> bool:
    """Whether the session `pid` is executing a statement that starts with `query_start`."""
    active: bool = await conn.fetchval(
        "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1 AND state = 'active'"
        " AND starts_with(query, $2))",
        pid,
        query_start,
    )
    return active


async def finished(conn: asyncpg.Connection, query_start: str) -> bool:
    """Whether a session on this database sits idle after a statement that starts with
    `query_start` (its last one)."""
    done: bool = await conn.fetchval(
        "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE datname = current_database()"
        " AND state = 'idle' AND starts_with(query, $1))",
        query_start,
    )
    return done
