"""Every test session gets a fresh database on a real PostgreSQL, migrated by alembic.

The server is SIGNOFF_DATABASE_URL / DATABASE_URL when set, else the embedded one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from approvals import ApprovalStore
from ledger import Database, Journal, resolve_url
from ledger.keys import KeyRing, LocalKek
from ledger.log import configure_logging
from ledger.scratch import scratch_database
from ledger.tool_ledger import ToolLedger

from .processes import TEST_KEK


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


@pytest.fixture(scope="session")
async def ring(db: Database) -> KeyRing:
    """The session database's key ring, under the session's KEK."""
    return await KeyRing.open(db, LocalKek(TEST_KEK))


@pytest.fixture(scope="module")
async def store(db: Database, ring: KeyRing) -> AsyncIterator[ApprovalStore]:
    approvals = ApprovalStore(db, ring, poll_interval=0.05)
    yield approvals
    await approvals.close()


@pytest.fixture(scope="module")
async def ledger(db: Database, ring: KeyRing) -> AsyncIterator[ToolLedger]:
    """A tool ledger with a 1 s lease, so tests see a dead worker's call quickly."""
    tool_ledger = ToolLedger(db, ring, lease_seconds=1.0, poll_interval=0.05)
    yield tool_ledger
    await tool_ledger.close()


@pytest.fixture(scope="session", autouse=True)
def quiet_logs() -> None:
    configure_logging("WARNING")
