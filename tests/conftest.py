"""Every test session gets a fresh database on a real PostgreSQL, migrated by alembic.

The server is SIGNOFF_DATABASE_URL / DATABASE_URL when set, else the embedded one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from ledger import Database, Journal, resolve_url
from ledger.log import configure_logging
from ledger.scratch import scratch_database


@pytest.fixture(scope="session")
async def server_url() -> str:
    return await asyncio.to_thread(resolve_url)


@pytest.fixture(scope="session")
async def database_url(server_url: str) -> AsyncIterator[str]:
    async with scratch_database(server_url, prefix="signoff_test") as url:
        yield url


@pytest.fixture
async def fresh_database_url(server_url: str) -> AsyncIterator[str]:
    """A database of its own, for tests that damage or reshape it."""
    async with scratch_database(server_url, prefix="signoff_test") as url:
        yield url


@pytest.fixture(scope="session")
async def db(database_url: str) -> AsyncIterator[Database]:
    database = await Database.connect(database_url)
    yield database
    await database.close()


@pytest.fixture(scope="session")
def journal(db: Database) -> Journal:
    return Journal(db)


@pytest.fixture(scope="session", autouse=True)
def quiet_logs() -> None:
    configure_logging("WARNING")
