"""Connecting, migrating and the errors a user sees when something is off."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from ledger import ConfigurationError, DatabaseUnavailable, SchemaFromPreRelease, SchemaOutOfDate
from ledger.store import Database, migrate
from ledger.store.config import configured_url, normalize_url
from tests.support.pg_tools import schema_of
from tests.support.ports import free_port
from tests.support.scratch import scratch_database, with_database

from .support.processes import run_cli


def test_plain_and_sqlalchemy_urls_are_accepted() -> None:
    assert normalize_url("postgres://u:p@h:5/d") == "postgresql://u:p@h:5/d"
    assert normalize_url("postgresql+asyncpg://u@h/d?sslmode=require") == (
        "postgresql://u@h/d?sslmode=require"
    )
    with pytest.raises(ConfigurationError, match="not a PostgreSQL URL"):
        normalize_url("mysql://u:secret@h/d")


def test_password_is_hidden_in_url_errors() -> None:
    with pytest.raises(ConfigurationError) as caught:
        normalize_url("mysql://u:secret@h/d")
    assert "secret" not in str(caught.value)


def test_signoff_url_wins_over_database_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "postgresql://a@h/one")
    monkeypatch.setenv("SIGNOFF_DATABASE_URL", "postgresql://a@h/two")
    assert configured_url() == "postgresql://a@h/two"
    monkeypatch.delenv("SIGNOFF_DATABASE_URL")
    assert configured_url() == "postgresql://a@h/one"


async def test_a_server_that_is_down_is_a_clear_error() -> None:
    url = f"postgresql://postgres:hunter2@127.0.0.1:{free_port()}/signoff"
    with pytest.raises(DatabaseUnavailable, match="cannot connect to PostgreSQL") as caught:
        await Database.connect(url)
    assert "hunter2" not in str(caught.value)


async def test_a_missing_database_is_a_clear_error(server_url: str) -> None:
    with pytest.raises(DatabaseUnavailable, match="does not exist"):
        await Database.connect(with_database(server_url, "signoff_no_such_database"))


async def test_a_schema_behind_the_code_says_to_upgrade(fresh_database_url: str) -> None:
    await asyncio.to_thread(migrate.downgrade, fresh_database_url, "base")
    with pytest.raises(SchemaOutOfDate, match="run `signoff db upgrade`"):
        await Database.connect(fresh_database_url)
    cli = await run_cli("ledger", "verify", database_url=fresh_database_url)
    assert cli.code == 2
    assert "signoff db upgrade" in cli.stderr


_LEFT_AT_BASE = """
SELECT c.relkind::text || ' ' || c.relname FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'public' AND c.relname NOT IN ('alembic_version', 'alembic_version_pkc')
UNION ALL
SELECT 'function ' || p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = 'public'
UNION ALL
SELECT 'type ' || t.typname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
 WHERE n.nspname = 'public' AND t.typtype IN ('e', 'd', 'c') AND t.typrelid = 0
UNION ALL
SELECT 'event trigger ' || evtname FROM pg_event_trigger
"""


async def test_upgrade_after_downgrade_base_gives_the_same_schema(fresh_database_url: str) -> None:
    at_head = await schema_of(fresh_database_url)
    assert "CREATE TABLE public.events" in at_head
    await asyncio.to_thread(migrate.downgrade, fresh_database_url, "base")
    await asyncio.to_thread(migrate.upgrade, fresh_database_url, "head")
    assert await schema_of(fresh_database_url) == at_head
    # The comparison can fail: one column more is a different schema.
    conn = await asyncpg.connect(fresh_database_url)
    try:
        await conn.execute("ALTER TABLE data_keys ADD COLUMN extra text")
    finally:
        await conn.close()
    assert await schema_of(fresh_database_url) != at_head


async def test_a_copy_of_the_session_template_is_a_database_migrated_from_empty(
    server_url: str, fresh_database_url: str
) -> None:
    """The scratch databases are copies of one migrated template: a copy must be what a real
    migration from an empty database gives, roles' rights included (`pg_dump` prints grants)."""
    async with scratch_database(server_url, prefix="signoff_test", migrated=False) as url:
        await asyncio.to_thread(migrate.upgrade, url)
        migrated = await schema_of(url)
    assert "GRANT " in migrated
    assert await schema_of(fresh_database_url) == migrated
    conn = await asyncpg.connect(fresh_database_url)
    try:
        assert await conn.fetchval("SELECT version_num FROM alembic_version") == (
            migrate.head_revision()
        )
    finally:
        await conn.close()


async def test_every_downgrade_leaves_the_schema_of_the_revision_before(
    fresh_database_url: str,
) -> None:
    url = fresh_database_url
    await asyncio.to_thread(migrate.downgrade, url, "base")
    conn = await asyncpg.connect(url)
    try:
        assert [r[0] for r in await conn.fetch(_LEFT_AT_BASE)] == []
    finally:
        await conn.close()
    schemas = [await schema_of(url)]
    while await current_revision(url) != migrate.head_revision():
        await asyncio.to_thread(migrate.upgrade, url, "+1")
        schemas.append(await schema_of(url))
    assert len(schemas) >= 2  # base and every revision, the baseline at least
    for before in reversed(schemas[:-1]):
        await asyncio.to_thread(migrate.downgrade, url, "-1")
        assert await schema_of(url) == before


async def current_revision(url: str) -> str | None:
    conn = await asyncpg.connect(url)
    try:
        revision: str | None = await conn.fetchval("SELECT max(version_num) FROM alembic_version")
        return revision
    finally:
        await conn.close()


async def test_upgrade_downgrade_upgrade_round_trips(fresh_database_url: str) -> None:
    for command in (["db", "downgrade", "base"], ["db", "upgrade"]):
        cli = await run_cli(*command, "--json", database_url=fresh_database_url)
        assert cli.code == 0, cli.stderr
    assert '"revision": "' + migrate.head_revision() in cli.stdout
    async with await Database.connect(fresh_database_url) as db, db.connection() as conn:
        assert await conn.fetchval("SELECT count(*) FROM events") == 0


async def test_concurrent_upgrades_take_turns(server_url: str) -> None:
    async with scratch_database(server_url, prefix="signoff_test") as url:
        await asyncio.to_thread(migrate.downgrade, url, "base")
        results = await asyncio.gather(
            *(run_cli("db", "upgrade", database_url=url) for _ in range(4))
        )
        assert [r.code for r in results] == [0, 0, 0, 0], [r.stderr for r in results]
        conn = await asyncpg.connect(url)
        try:
            assert await conn.fetchval("SELECT version_num FROM alembic_version") == (
                migrate.head_revision()
            )
        finally:
            await conn.close()


async def test_a_failed_migration_leaves_the_revision_unchanged(fresh_database_url: str) -> None:
    await asyncio.to_thread(migrate.downgrade, fresh_database_url, "base")
    conn = await asyncpg.connect(fresh_database_url)
    try:  # a table in the way makes the first migration fail half-way
        await conn.execute("CREATE TABLE events (x int)")
        cli = await run_cli("db", "upgrade", database_url=fresh_database_url)
        assert cli.code != 0
        assert await conn.fetchval("SELECT to_regclass('alembic_version')") is None or (
            await conn.fetchval("SELECT count(*) FROM alembic_version") == 0
        )
        assert await conn.fetchval("SELECT to_regprocedure('signoff_refuse_change()')") is None
    finally:
        await conn.close()


def test_urls_in_messages_never_show_a_password() -> None:
    from ledger.store.config import masked

    assert "hunter2" not in masked("postgresql://u:hunter2@h/d")
    assert "hunter2" not in masked("postgresql://u@h/d?password=hunter2&sslmode=require")
    assert "hunter2" not in masked("host=h password=hunter2")
    assert "sslmode=require" in masked("postgresql://u@h/d?password=hunter2&sslmode=require")


async def test_a_database_left_at_a_pre_release_revision_is_told_to_be_recreated(
    fresh_database_url: str,
) -> None:
    conn = await asyncpg.connect(fresh_database_url)
    try:
        await conn.execute("UPDATE alembic_version SET version_num = '0022'")
    finally:
        await conn.close()
    with pytest.raises(SchemaFromPreRelease, match="pre-release Signoff"):
        await Database.connect(fresh_database_url)
    with pytest.raises(SchemaFromPreRelease):
        await asyncio.to_thread(migrate.upgrade, fresh_database_url)
    for command in (["db", "upgrade"], ["ledger", "verify"]):
        cli = await run_cli(*command, database_url=fresh_database_url)
        assert cli.code == 2, cli.stderr
        assert cli.stderr.strip().count("\n") == 0, cli.stderr
        assert "recreate the database" in cli.stderr
