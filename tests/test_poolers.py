"""Connection poolers, with a real PgBouncer in front of the test server: a pooler that hands
server sessions between clients (transaction or statement mode) is refused when a `Database`
connects, by the library and the `signoff` command (its `db` migrations included) alike, in one
line and before anything is written; one in session mode is not, however its pool stands.
`SIGNOFF_POOLER_CHECK=off` lets a refused one through, with a warning. The multi-process tests
run through PgBouncer in session mode as well (the `route` fixture)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from urllib.parse import urlsplit

import pytest

from ledger.errors import DatabaseUnavailable, PoolerModeUnsupported
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database, migrate, pooling
from ledger.store.config import masked
from ledger.store.db import open_raw_connection, revision_on
from ledger.store.logins import temporary_login
from ledger.store.settings import Settings
from tests.support.scratch import event_count, scratch_database

from .support.pooler import pgbouncer
from .support.processes import TEST_KEK, kek_env, run_cli

LogRecords = Callable[[], list[logging.LogRecord]]
ROUND_ROBIN = {"server_round_robin": "1"}  # the oldest idle server first (default: the newest)
POOLS = pytest.mark.parametrize(
    ("settings", "idle"),
    [({}, 0), ({}, 3), (ROUND_ROBIN, 2), (ROUND_ROBIN, 3)],
    ids=["newest-first", "newest-first-3-idle", "oldest-first-2-idle", "oldest-first-3-idle"],
)


@pytest.fixture(scope="module")
async def keyed_url(server_url: str) -> AsyncIterator[str]:
    """A database of this module's, its data keys made by the owner."""
    async with scratch_database(server_url, prefix="signoff_pooled") as url:
        async with await Database.connect(url) as db:
            await KeyRing.open(db, LocalKek(TEST_KEK))
        yield url


@pytest.fixture(scope="module")
async def worker_url(keyed_url: str) -> AsyncIterator[str]:
    """A login on it with only `signoff_app`."""
    async with temporary_login(keyed_url, "signoff_app") as url:
        yield url


async def leave_idle(url: str, count: int) -> None:
    """Make the pooler open `count` server sessions (each held by a transaction at the same
    time) and leave them idle in its pool, as a pool that served other clients before."""
    connections = [await open_raw_connection(url, statement_cache_size=0) for _ in range(count)]
    try:
        for conn in connections:
            await conn.execute("BEGIN")
        pids = {await conn.fetchval("SELECT pg_backend_pid()") for conn in connections}
        assert len(pids) == count
        for conn in connections:
            await conn.execute("COMMIT")
    finally:
        for conn in connections:
            await conn.close()


async def refused(url: str) -> PoolerModeUnsupported:
    with pytest.raises(PoolerModeUnsupported) as raised:
        db = await Database.connect(url, pool_size=2)
        await db.close()
    return raised.value


def says_why(text: str) -> None:
    assert "\n" not in text.strip(), text
    for reason in ("LISTEN/NOTIFY", "prepared statements", "pool_mode = session"):
        assert reason in text, text


@POOLS
async def test_connecting_through_a_transaction_pooler_is_refused(
    server_url: str, keyed_url: str, worker_url: str, settings: Mapping[str, str], idle: int
) -> None:
    async with pgbouncer(server_url, "transaction", settings) as through:
        await leave_idle(through(keyed_url), idle)
        for url in (keyed_url, worker_url):
            error = await refused(through(url))
            assert error.mode == "transaction"
            assert str(urlsplit(worker_url).password) not in str(error)
            says_why(str(error))


async def test_connecting_through_a_statement_pooler_is_refused(
    server_url: str, keyed_url: str
) -> None:
    async with pgbouncer(server_url, "statement") as through:
        error = await refused(through(keyed_url))
    assert error.mode == "statement"
    says_why(str(error))


@POOLS
async def test_a_session_pooler_is_not_taken_for_one_that_shares_sessions(
    server_url: str, keyed_url: str, worker_url: str, settings: Mapping[str, str], idle: int
) -> None:
    """Eight processes' worth of databases connect at once through it, the worker's login
    among them, and each works."""
    async with pgbouncer(server_url, "session", settings) as through:
        await leave_idle(through(keyed_url), idle)
        urls = [through(keyed_url), through(worker_url)] * 4
        databases = await asyncio.gather(*(Database.connect(u, pool_size=2) for u in urls))
        try:
            for db in databases:
                async with db.transaction() as conn:
                    assert await conn.fetchval("SELECT count(*) FROM events") >= 0
        finally:
            await asyncio.gather(*(db.close() for db in databases))


async def test_the_command_refuses_a_transaction_pooler_in_one_line_and_writes_nothing(
    server_url: str, keyed_url: str, worker_url: str
) -> None:
    before = await event_count(keyed_url)
    name = f"pooled-{uuid.uuid4().hex[:8]}"
    async with pgbouncer(server_url, "transaction") as through:
        runs = {
            "doctor": await run_cli("doctor", database_url=through(worker_url), env=kek_env()),
            "verify": await run_cli(
                "ledger", "verify", database_url=through(keyed_url), env=kek_env()
            ),
            "write": await run_cli(
                "reviewers", "add", name, "--by", "admin", database_url=through(keyed_url)
            ),
        }
    for what, result in runs.items():
        assert result.code == 2, (what, result)
        assert result.stdout == "", (what, result)
        [line] = result.stderr.splitlines()
        assert line.startswith("error: ") and "transaction mode" in line, (what, line)
        says_why(line)
    assert await event_count(keyed_url) == before  # the reviewer was not added, nor anything


async def test_a_session_pool_with_no_server_left_is_said_to_be_full_not_refused(
    server_url: str, keyed_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One server session in the pool, which the probe holds: the second connection waits for
    one, and the start fails as unavailable, naming the full pool, after the handout time;
    both connections are gone then, so the next client gets the session (PgBouncer would
    refuse it after 5 s of waiting)."""
    monkeypatch.setattr(pooling, "HANDOUT_SECONDS", 1.0)
    settings = {"default_pool_size": "1", "query_wait_timeout": "5"}
    async with pgbouncer(server_url, "session", settings) as through:
        with pytest.raises(DatabaseUnavailable, match="is its pool full"):
            await Database.connect(through(keyed_url), pool_size=1)
        conn = await open_raw_connection(through(keyed_url))
        try:
            assert await conn.fetchval("SELECT 1") == 1
        finally:
            await conn.close()


@pytest.fixture
def pooler_log(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> LogRecords:
    """What the pooler check logs from now on, as if nothing had been logged in this process."""
    monkeypatch.setattr(pooling, "_unchecked", set())
    caplog.set_level(logging.WARNING, logger="signoff")
    name = f"signoff.{pooling.__name__}"
    return lambda: [r for r in caplog.records if r.name == name]


async def test_turning_the_check_off_lets_a_transaction_pooler_through_with_one_warning(
    server_url: str, keyed_url: str, pooler_log: LogRecords
) -> None:
    async with pgbouncer(server_url, "transaction") as through:
        url = through(keyed_url)
        checked = Settings.from_env({}, database_url=url)
        assert checked.pooler_check, "on unless turned off"
        with pytest.raises(PoolerModeUnsupported):
            await Database.connect(url, pool_size=1, settings=checked)
        assert pooler_log() == []
        unchecked = Settings.from_env({"SIGNOFF_POOLER_CHECK": "off"}, database_url=url)
        for _ in range(2):  # one client at a time: PgBouncer hands it the same server session
            db = await Database.connect(url, pool_size=1, settings=unchecked)
            async with db, db.connection() as conn:
                assert await conn.fetchval("SELECT count(*) FROM events") >= 0
    [warning] = pooler_log()  # once, not on every connect
    assert warning.levelno == logging.WARNING
    assert "SIGNOFF_POOLER_CHECK=off" in warning.getMessage()
    assert getattr(warning, "target", None) == masked(url)


async def schema_at(url: str) -> str | None:
    conn = await open_raw_connection(url)
    try:
        return await revision_on(conn)
    finally:
        await conn.close()


async def test_the_db_commands_refuse_a_transaction_pooler_unless_the_check_is_off(
    server_url: str, fresh_database_url: str
) -> None:
    """Migrating through it would hold alembic's advisory lock on a session other clients
    get: `db upgrade`, `db downgrade` and `db current` refuse it, in one line, migrating
    nothing; turned off, the check is skipped with a warning on stderr."""
    head = migrate.head_revision()
    async with pgbouncer(server_url, "transaction") as through:
        url = through(fresh_database_url)
        runs = {
            "upgrade": await run_cli("db", "upgrade", database_url=url),
            "downgrade": await run_cli("db", "downgrade", "base", database_url=url),
            "current": await run_cli("db", "current", "--json", database_url=url),
        }
        env = {**os.environ, "SIGNOFF_POOLER_CHECK": "off"}
        unchecked = await run_cli("db", "current", "--json", database_url=url, env=env)
    for what, result in runs.items():
        assert result.code == 2, (what, result)
        assert result.stdout == "", (what, result)
        [line] = result.stderr.splitlines()
        assert line.startswith("error: ") and "transaction mode" in line, (what, line)
        says_why(line)
    assert await schema_at(fresh_database_url) == head  # not downgraded
    assert unchecked.code == 0, unchecked
    assert json.loads(unchecked.stdout)["revision"] == head
    [warning] = [json.loads(line) for line in unchecked.stderr.splitlines()]
    assert warning["level"] == "warning" and "SIGNOFF_POOLER_CHECK=off" in warning["event"]


async def test_the_db_commands_migrate_through_a_session_pooler(
    server_url: str, fresh_database_url: str
) -> None:
    """Migrations work through a session pool: alembic's connection asks PgBouncer for no
    startup parameter it refuses (its statement timeout is a SET)."""
    head = migrate.head_revision()
    async with pgbouncer(server_url, "session") as through:
        url = through(fresh_database_url)
        down = await run_cli("db", "downgrade", database_url=url)
        assert down.code == 0, down
        assert await schema_at(fresh_database_url) not in (head, None)  # one step down
        up = await run_cli("db", "upgrade", database_url=url)
        assert up.code == 0, up
    assert await schema_at(fresh_database_url) == head
