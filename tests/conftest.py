"""Every test session gets a fresh database on a real PostgreSQL, migrated by alembic.

The server is SIGNOFF_DATABASE_URL / DATABASE_URL when set, else the embedded one, which the
session stops at its end when it started it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import pytest

from approvals import ApprovalStore
from ledger import Database, Journal, resolve_url
from ledger.config import configured_url
from ledger.keys import KeyRing, LocalKek
from ledger.log import configure_logging
from ledger.scratch import scratch_database
from ledger.tool_ledger import ToolLedger

from .processes import TEST_KEK
from .support.embedded_homes import remove_session_base, servers_left


@pytest.fixture(scope="session", autouse=True)
def no_embedded_server_left() -> Iterator[None]:
    """No embedded server outlives the session: the default one (no database URL) is stopped
    when the session started it, and none of the tests' private servers may be left running."""
    from ledger.embedded import default_home, server_status, stop_server

    home = None if configured_url() else default_home()
    started_here = home is not None and not server_status(home).running
    yield
    left = [f"{path} (pid {pid})" for pid, path in servers_left().items()]
    remove_session_base()  # kills what was left, so that a failed run leaves nothing behind
    if started_here and home is not None:
        stop_server(home)
        if (status := server_status(home)).running:
            left.append(f"{status.data} (pid {status.pid})")
    assert not left, f"embedded servers left running: {', '.join(left)}"


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
