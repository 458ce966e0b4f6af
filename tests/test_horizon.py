"""No login holds the journal's global order back for long: a database migrated by Signoff
ends an idle transaction (and a long statement) of every login, whatever roles it holds, and a
per-login setting overrides the defaults. Written as the attacker acts: a login that holds only
`signoff_auditor` opens a transaction, takes a transaction id and goes idle."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from ledger.journal import Journal, NewEvent
from ledger.store import Database, migrate
from ledger.store.logins import temporary_login

from .support.scratch import scratch_database
from .support.until import until

DEFAULTS = {"idle_in_transaction_session_timeout": "1min", "statement_timeout": "5min"}


@pytest.fixture(scope="module")
async def migrated_url(server_url: str) -> AsyncIterator[str]:
    """A database migrated from empty, as a deployment's is (not a copy of the template: a
    copy does not take its template's settings)."""
    async with scratch_database(server_url, prefix="signoff_horizon", migrated=False) as url:
        await asyncio.to_thread(migrate.upgrade, url)
        yield url


async def _settings(url: str) -> dict[str, str]:
    conn = await asyncpg.connect(url)
    try:
        return {name: await conn.fetchval(f"SHOW {name}") for name in DEFAULTS}
    finally:
        await conn.close()


@pytest.mark.parametrize(
    "role", ["signoff_auditor", "signoff_app", "signoff_reviewer", "signoff_key_admin"]
)
async def test_every_roles_login_gets_the_session_limits(migrated_url: str, role: str) -> None:
    async with temporary_login(migrated_url, role) as url:
        assert await _settings(url) == DEFAULTS


async def test_an_auditors_idle_transaction_is_ended_and_the_order_moves_on(
    migrated_url: str,
) -> None:
    async with (
        temporary_login(migrated_url, "signoff_auditor") as url,
        await Database.connect(migrated_url) as owner,
    ):
        auditor = await asyncpg.connect(url)
        login = await auditor.fetchval("SELECT session_user")
        database = await auditor.fetchval("SELECT current_database()")
        await auditor.close()
        # The documented override, per login (it wins over the database's default); short here
        # so the test need not wait a minute.
        async with owner.connection() as conn:
            await conn.execute(
                f'ALTER ROLE "{login}" IN DATABASE "{database}" '
                "SET idle_in_transaction_session_timeout = '1s'"
            )
        assert (await _settings(url))["idle_in_transaction_session_timeout"] == "1s"

        journal = Journal(owner)
        holder = await asyncpg.connect(url)
        try:
            await holder.execute("BEGIN")
            await holder.fetchval("SELECT pg_current_xact_id()")  # holds the horizon
            appended = await journal.append(
                f"horizon:{uuid.uuid4().hex[:8]}",
                [NewEvent("horizon.noted", {}, actor="t")],
                expected_version=0,
            )
            (position,) = appended.positions
            # Ended by the server: the event joins the global order.
            await until(
                lambda: _reaches(journal, position), 30, "the global order past the idle one"
            )
            # The server ended the session: asyncpg says so as a server error, a closed
            # connection or, when the end meets its own bookkeeping, an internal client error.
            ended = (asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError)
            with pytest.raises(ended):
                await holder.fetchval("SELECT 1")
        finally:
            await holder.close()


async def _reaches(journal: Journal, position: int) -> bool:
    return await journal.last_position() >= position


async def test_an_auditors_long_statement_is_ended(migrated_url: str) -> None:
    async with temporary_login(migrated_url, "signoff_auditor") as url:
        conn = await asyncpg.connect(url)
        try:
            login = await conn.fetchval("SELECT session_user")
        finally:
            await conn.close()
        owner = await asyncpg.connect(migrated_url)
        try:
            await owner.execute(f"ALTER ROLE \"{login}\" SET statement_timeout = '1s'")
        finally:
            await owner.close()
        conn = await asyncpg.connect(url)
        try:
            with pytest.raises(asyncpg.QueryCanceledError):
                await conn.execute("BEGIN; SELECT pg_current_xact_id(); SELECT pg_sleep(30)")
        finally:
            await conn.close()
