"""A connection lost under Signoff (a terminated backend, a server restart) is
`DatabaseUnavailable`, whatever shape the driver reports it in, writes nothing, and the pool
serves again afterwards."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from approvals import ApprovalStore
from ledger import DatabaseUnavailable
from ledger.journal import Journal, NewEvent
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database, migrate
from ledger.store.db import open_raw_connection
from ledger.store.embedded import ensure_server, stop_server
from tests.support.scratch import scratch_database

from .support.activity import running
from .support.embedded_homes import private_home
from .support.processes import TEST_KEK
from .support.until import until


@pytest.fixture(scope="module")
async def loss_db(server_url: str) -> AsyncIterator[Database]:
    """A database and pool of this module's own: the tests below kill its connections."""
    async with scratch_database(server_url, prefix="signoff_test") as url:
        database = await Database.connect(url, pool_size=2)
        await KeyRing.open(database, LocalKek(TEST_KEK))  # its keys exist before any count
        yield database
        await database.close()


async def terminate(db: Database, conn: Any) -> None:
    """End `conn`'s backend from another session, and wait until the client has noticed."""
    pid = await conn.fetchval("SELECT pg_backend_pid()")
    killer = await open_raw_connection(db.url)
    try:
        assert await killer.fetchval("SELECT pg_terminate_backend($1, 5000)", pid)
    finally:
        await killer.close()
    await noticed(conn)


async def noticed(conn: Any) -> None:
    """Until the client sees the connection closed (the pool then detaches it at once)."""

    def closed() -> bool:
        try:
            return bool(conn.is_closed())
        except asyncpg.InterfaceError:  # released back to the pool: closed
            return True

    await until(closed, 10, "the client noticed its connection end")


async def events(db: Database) -> int:
    async with db.connection() as conn:
        count: int = await conn.fetchval("SELECT count(*) FROM events")
    return count


async def idle_in_transaction(db: Database) -> None:
    async with db.transaction() as conn:
        await terminate(db, conn)
        await conn.fetchval("SELECT 1")


async def between_statements(db: Database) -> None:
    async with db.connection() as conn:
        await terminate(db, conn)
        await conn.fetchval("SELECT 1")


async def during_a_statement(db: Database) -> None:
    async with db.connection() as conn:
        pid = await conn.fetchval("SELECT pg_backend_pid()")
        sleeping = asyncio.create_task(conn.fetchval("SELECT pg_sleep(30)"))
        killer = await open_raw_connection(db.url)
        try:
            await until(lambda: running(killer, pid, "SELECT pg_sleep"), what="mid-statement")
            await killer.fetchval("SELECT pg_terminate_backend($1)", pid)
        finally:
            await killer.close()
        await sleeping


async def journal_append_in_the_callers_transaction(db: Database) -> None:
    async with db.transaction() as conn:
        await terminate(db, conn)
        await Journal(db).append(
            f"loss:{uuid.uuid4().hex}",
            [NewEvent("loss.test", {"n": 1}, actor="tester")],
            expected_version=0,
            connection=conn,
        )


async def approval_request_in_the_callers_transaction(db: Database) -> None:
    store = ApprovalStore(db, await KeyRing.open(db, LocalKek(TEST_KEK)))
    async with db.transaction() as conn:
        await terminate(db, conn)
        await store.request(
            run_id="run-loss",
            tool="refund",
            args={"order": "A-1"},
            call_id=uuid.uuid4().hex,
            requested_by="agent",
            connection=conn,
        )


LOSSES: list[Callable[[Database], Awaitable[None]]] = [
    idle_in_transaction,
    between_statements,
    during_a_statement,
    journal_append_in_the_callers_transaction,
    approval_request_in_the_callers_transaction,
]


@pytest.mark.parametrize("lose", LOSSES, ids=[f.__name__ for f in LOSSES])
async def test_a_terminated_backend_is_database_unavailable_and_the_pool_recovers(
    loss_db: Database, lose: Callable[[Database], Awaitable[None]]
) -> None:
    before = await events(loss_db)
    with pytest.raises(DatabaseUnavailable) as caught:
        await lose(loss_db)
    assert "SQLSTATE" in str(caught.value) or "connection" in str(caught.value)
    assert await events(loss_db) == before
    async with loss_db.connection() as conn:  # the pool replaced the dead connections
        assert await conn.fetchval("SELECT 1") == 1


@pytest.fixture
def home() -> Iterator[Path]:
    """A private embedded server's home; nothing of it outlives the test."""
    with private_home() as path:
        yield path


async def test_a_server_restart_under_an_open_transaction_is_database_unavailable(
    home: Path,
) -> None:
    url = await asyncio.to_thread(ensure_server, home)
    await asyncio.to_thread(migrate.upgrade, url)
    db = await Database.connect(url, pool_size=2)
    journal = Journal(db)
    stream = f"restart:{uuid.uuid4().hex}"
    try:
        with pytest.raises(DatabaseUnavailable):
            async with db.transaction() as conn:
                await conn.fetchval("SELECT 1")
                await asyncio.to_thread(stop_server, home)
                assert await asyncio.to_thread(ensure_server, home) == url
                await noticed(conn)
                await journal.append(
                    stream,
                    [NewEvent("restart.test", {}, actor="tester")],
                    expected_version=0,
                    connection=conn,
                )
        assert await journal.stream_version(stream) == 0  # nothing was written
        appended = await journal.append(
            stream, [NewEvent("restart.test", {}, actor="tester")], expected_version=0
        )
        assert appended.version == 1
    finally:
        await db.close()
