"""Every statement run on a connection from `Database` raises typed errors: the SQLSTATE
registry of `ledger.errors` applies at `Database.connection()`, whatever statement failed and
whoever wrote it (the journal, the tool-call ledger's one-statement steps, plain SQL)."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest

from ledger.calls import CallContext, ToolCall, ToolLedger, call_stream
from ledger.errors import (
    AppendOnlyViolation,
    DatabaseError,
    DatabaseUnavailable,
    DeadlockDetected,
    SerializationFailure,
    UniqueViolation,
    VersionConflict,
    lookup,
    registered,
    translate,
)
from ledger.journal import Journal, NewEvent
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database

from .support.activity import blocked_by, running
from .support.processes import TEST_KEK
from .support.until import until


async def double(args: dict[str, Any], context: CallContext) -> dict[str, Any]:
    return {"doubled": args["n"] * 2}


@pytest.fixture
async def damaged(fresh_database_url: str) -> AsyncIterator[tuple[ToolLedger, Journal]]:
    """A tool ledger on a database of its own: the tests below put foreign events in call
    streams, which the session database's projection checks would rightly report."""
    async with await Database.connect(fresh_database_url, pool_size=2) as db:
        tool_ledger = ToolLedger(db, await KeyRing.open(db, LocalKek(TEST_KEK)))
        yield tool_ledger, Journal(db)
        await tool_ledger.close()


@pytest.fixture
async def table(db: Database) -> AsyncIterator[str]:
    """A table of this test's own with one row (k = 1, v = 0), dropped afterwards."""
    name = f"registry_{uuid.uuid4().hex[:12]}"
    async with db.connection() as conn:
        await conn.execute(f"CREATE TABLE {name} (k int PRIMARY KEY, v int NOT NULL)")
        await conn.execute(f"INSERT INTO {name} VALUES (1, 0), (2, 0)")
    yield name
    async with db.connection() as conn:
        await conn.execute(f"DROP TABLE {name}")


@pytest.mark.parametrize("code", sorted(registered()))
async def test_every_registered_sqlstate_raised_by_the_server_is_its_typed_error(
    db: Database, code: str
) -> None:
    sqlstate = code if len(code) == 5 else f"{code}000"  # a class: its generic code
    assert re.fullmatch(r"[0-9A-Z]{5}", sqlstate)
    with pytest.raises(DatabaseError) as caught:
        async with db.connection() as conn:
            await conn.execute(
                f"DO $$ BEGIN RAISE EXCEPTION 'raised by a test' USING ERRCODE = '{sqlstate}'; "
                "END $$"
            )
    assert type(caught.value) is registered()[code]
    assert caught.value.sqlstate == sqlstate
    assert isinstance(caught.value.__cause__, asyncpg.PostgresError), "chained to the driver's"


def test_lookup_falls_back_to_the_class_and_leaves_other_codes_alone() -> None:
    assert lookup("08006") is DatabaseUnavailable  # connection failure, by its class
    assert lookup("57P01") is DatabaseUnavailable
    assert lookup("57014") is None, "a cancelled statement is not a lost connection"
    assert lookup("40P01") is DeadlockDetected
    assert lookup("23503") is None, "a foreign key violation has no typed error (yet)"
    assert SerializationFailure.retryable and DeadlockDetected.retryable
    assert not UniqueViolation.retryable and not DatabaseUnavailable.retryable


def test_a_second_class_for_one_sqlstate_is_refused() -> None:
    with pytest.raises(TypeError, match="SG409 is registered to VersionConflict"):

        class Again(DatabaseError, code="SG409"):
            pass


def test_errors_without_a_registered_code_are_left_as_they_are() -> None:
    assert translate(ValueError("not the database's")) is None
    assert translate(TimeoutError()) is None, "a slow statement is not a lost connection"
    assert isinstance(translate(ConnectionResetError("reset")), DatabaseUnavailable)


async def test_a_stale_stream_behind_a_new_call_is_a_version_conflict_from_the_ledger(
    damaged: tuple[ToolLedger, Journal],
) -> None:
    ledger, journal = damaged
    run = f"run-{uuid.uuid4().hex[:10]}"
    stream = call_stream(run, "c1")
    await journal.append(
        stream, [NewEvent("test.squatted", {}, actor="mallory")], expected_version=0
    )
    with pytest.raises(VersionConflict) as caught:
        await ledger.execute(ToolCall(run, "c1", "double", {"n": 1}), double)
    conflict = caught.value
    assert (conflict.stream_id, conflict.expected_version, conflict.actual_version) == (
        stream,
        0,
        1,
    )
    assert conflict.sqlstate == "SG409"
    assert isinstance(conflict.__cause__, asyncpg.PostgresError)
    async with ledger.db.connection() as conn:
        assert await conn.fetchval("SELECT count(*) FROM tool_calls WHERE run_id = $1", run) == 0


async def test_a_stale_expected_version_in_the_ledgers_advance_statement_is_a_version_conflict(
    damaged: tuple[ToolLedger, Journal],
) -> None:
    ledger, journal = damaged
    run = f"run-{uuid.uuid4().hex[:10]}"
    await ledger.execute(ToolCall(run, "c1", "double", {"n": 2}), double)
    async with ledger.db.connection() as conn:  # as a reviewer would find it: resolvable
        await conn.execute(
            "UPDATE tool_calls SET status = 'outcome_unknown' WHERE run_id = $1", run
        )
    record = await ledger.get(run, "c1")
    stream = call_stream(run, "c1")
    # The stream moves on without the row: the row's fence passes, the append's does not.
    await journal.append(
        stream, [NewEvent("test.noted", {}, actor="tester")], expected_version=record.version
    )
    step = NewEvent(
        "call.resolved",
        {
            "status": "failed",
            "by": "x",
            "result_digest": "0" * 64,
            "at": datetime.now(UTC).isoformat(),
        },
        actor="x",
    )
    with pytest.raises(VersionConflict) as caught:
        async with ledger.db.connection() as conn:
            await ledger.records.advance(conn, record, [step])
    conflict = caught.value
    assert (conflict.stream_id, conflict.expected_version) == (stream, record.version)
    assert conflict.actual_version == record.version + 1
    assert await ledger.get(run, "c1") == record, "the row's update went with the append"


async def test_racing_appends_lose_with_the_version_they_found(database_url: str) -> None:
    stream = f"test:{uuid.uuid4().hex}"
    async with await Database.connect(database_url, pool_size=2) as db:
        journal = Journal(db)
        async with db.transaction() as first:
            await journal.append(
                stream, [NewEvent("test.won", {}, actor="a")], expected_version=0, connection=first
            )
            # The second append passes the head check and waits on the first's new version.
            second = asyncio.create_task(
                journal.append(stream, [NewEvent("test.lost", {}, actor="b")], expected_version=0)
            )
            pid = await first.fetchval("SELECT pg_backend_pid()")
            watcher = await asyncpg.connect(database_url)  # the pool's two are both taken
            try:
                await until(lambda: blocked_by(watcher, pid), what="the second append waits")
            finally:
                await watcher.close()
            assert not second.done()
        with pytest.raises(VersionConflict) as caught:
            await second
    assert (caught.value.stream_id, caught.value.actual_version) == (stream, 1)
    assert caught.value.sqlstate == "SG409"


async def test_changing_the_journal_is_a_typed_append_only_violation(
    db: Database, journal: Journal
) -> None:
    stream = f"test:{uuid.uuid4().hex}"
    await journal.append(stream, [NewEvent("test.kept", {}, actor="a")], expected_version=0)
    with pytest.raises(AppendOnlyViolation) as caught:
        async with db.connection() as conn:
            await conn.execute("DELETE FROM events WHERE stream_id = $1", stream)
    assert (caught.value.table, caught.value.operation) == ("events", "DELETE")
    assert caught.value.sqlstate == "SG403"


async def test_a_unique_violation_in_plain_sql_is_typed_with_its_constraint(
    db: Database, table: str
) -> None:
    with pytest.raises(UniqueViolation) as caught:
        async with db.transaction() as conn:
            await conn.execute(f"INSERT INTO {table} VALUES (1, 1)")
    assert (caught.value.constraint, caught.value.table) == (f"{table}_pkey", table)
    assert caught.value.sqlstate == "23505"
    assert isinstance(caught.value.__cause__, asyncpg.UniqueViolationError)
    assert "(k)=(1)" not in str(caught.value), "the message never quotes the values"


async def test_a_concurrent_update_under_repeatable_read_is_a_retryable_serialization_failure(
    db: Database, table: str
) -> None:
    with pytest.raises(SerializationFailure) as caught:
        async with db.connection() as conn, conn.transaction(isolation="repeatable_read"):
            await conn.fetchval(f"SELECT v FROM {table} WHERE k = 1")  # the snapshot is taken
            async with db.connection() as other:
                await other.execute(f"UPDATE {table} SET v = 1 WHERE k = 1")
            await conn.execute(f"UPDATE {table} SET v = 2 WHERE k = 1")
    assert caught.value.sqlstate == "40001" and caught.value.retryable
    assert type(caught.value) is SerializationFailure


async def test_a_deadlock_is_typed_and_retryable(db: Database, table: str) -> None:
    both_locked = asyncio.Event()
    locked = 0

    async def lock(first: int, second: int) -> None:
        nonlocal locked
        async with db.transaction() as conn:
            await conn.execute(f"UPDATE {table} SET v = v + 1 WHERE k = $1", first)
            locked += 1
            if locked == 2:
                both_locked.set()
            await both_locked.wait()
            await conn.execute(f"UPDATE {table} SET v = v + 1 WHERE k = $1", second)

    results = await asyncio.gather(lock(1, 2), lock(2, 1), return_exceptions=True)
    failures = [r for r in results if isinstance(r, BaseException)]
    assert len(failures) == 1, results
    assert isinstance(failures[0], DeadlockDetected)
    assert failures[0].sqlstate == "40P01" and failures[0].retryable


async def test_a_backend_terminated_mid_statement_is_unavailable_with_its_sqlstate(
    database_url: str,
) -> None:
    async with await Database.connect(database_url, pool_size=2) as db:
        with pytest.raises(DatabaseUnavailable) as caught:
            async with db.connection() as conn:
                pid = await conn.fetchval("SELECT pg_backend_pid()")
                sleeping = asyncio.create_task(conn.execute("SELECT pg_sleep(30)"))
                killer = await asyncpg.connect(database_url)
                try:
                    await until(
                        lambda: running(killer, pid, "SELECT pg_sleep"), what="mid-statement"
                    )
                    assert await killer.fetchval("SELECT pg_terminate_backend($1, 5000)", pid)
                finally:
                    await killer.close()
                await sleeping
        # The server's FATAL 57P01, or the driver's 08003 when the socket closes first.
        assert caught.value.sqlstate in ("57P01", "08003")
        assert isinstance(caught.value.__cause__, asyncpg.PostgresError)
        async with db.connection() as conn:  # the pool serves again
            assert await conn.fetchval("SELECT 1") == 1


async def test_a_refused_connection_keeps_the_servers_sqlstate(database_url: str) -> None:
    # The path names the database; the query may hold a socket folder (the embedded server).
    missing = urlsplit(database_url)._replace(path=f"/missing_{uuid.uuid4().hex[:8]}").geturl()
    with pytest.raises(DatabaseUnavailable) as caught:
        await Database.connect(missing)
    assert caught.value.sqlstate == "3D000"  # invalid_catalog_name: no such database


@pytest.mark.parametrize(
    "raised", [ConnectionRefusedError(111, "webhook refused"), FileNotFoundError(2, "no file")]
)
async def test_a_socket_error_of_code_inside_a_block_is_not_a_lost_database(
    database_url: str, raised: OSError
) -> None:
    """A gate, a KMS or a progress callback runs inside `connection()`: its own OSError leaves
    as itself, and the pool keeps its connection."""
    async with await Database.connect(database_url, pool_size=1) as one:
        async with one.connection() as conn:
            before = await conn.fetchval("SELECT pg_backend_pid()")
        with pytest.raises(type(raised)) as caught:
            async with one.transaction():
                raise raised
        assert caught.value is raised
        async with one.connection() as conn:  # not expired: the same backend serves again
            assert await conn.fetchval("SELECT pg_backend_pid()") == before
