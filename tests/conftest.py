"""Every test session gets a fresh database on a real PostgreSQL, migrated by alembic.

The server is SIGNOFF_DATABASE_URL / DATABASE_URL when set, else the embedded one, which the
session stops at its end when it started it. The session migrates one template database on it
and every scratch database (`database_url`, `fresh_database_url`, `scratch_database`) is a copy
of it; the tests of migrations themselves start from an empty database and migrate for real.

Every test fails after 600 s (pytest-timeout; `timeout` in pyproject.toml), printing where it
hung, so one stuck test cannot hang the run; a slower test says so with
`@pytest.mark.timeout(seconds)`.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from approvals import ApprovalStore
from ledger.calls.service import ToolLedger
from ledger.journal import Journal
from ledger.keys import KeyRing, LocalKek
from ledger.log import configure_logging
from ledger.store import Database, resolve_url
from ledger.store.config import configured_url
from ledger.store.embedded import default_home, server_status, stop_server
from tests.support.scratch import migrated_template, scratch_database

from .support.directory import list_reviewers
from .support.embedded_homes import remove_session_base, servers_left
from .support.forks import stop_fork_server
from .support.pooler import pgbouncer
from .support.processes import REVIEWER_KEK_ENV, TEST_KEK

# The session decides approvals too: every database's settings (and every child) carry the
# reviewer KEK. A worker's ring without it is built from explicit settings in the tests of it.
os.environ.update(REVIEWER_KEK_ENV)


def _session_home() -> Path | None:
    """The embedded home the session uses: None when a database URL is configured."""
    return None if configured_url() else default_home()


def _running(home: Path) -> int | None:
    return server_status(home).pid


@pytest.fixture(scope="session", autouse=True)
async def fork_server() -> AsyncIterator[None]:
    """The test programs' fork server (`support.forks`), stopped when the session ends."""
    yield
    await stop_fork_server()


@pytest.fixture(scope="session", autouse=True)
def no_embedded_server_left() -> Iterator[None]:
    """Fails the session if it leaves an embedded server running: one of the tests' private
    servers, or the session's default one when it was not running before the session. Stops
    them afterwards, so that a failed run leaves nothing behind either."""
    home = _session_home()
    was_running = home is not None and _running(home) is not None
    yield
    left = [f"{path} (pid {pid})" for pid, path in servers_left().items()]
    remove_session_base()
    if home is not None and not was_running and (pid := _running(home)) is not None:
        left.append(f"{home / 'data'} (pid {pid})")
        stop_server(home)
    assert not left, f"embedded servers left running: {', '.join(left)}"


@pytest.fixture(scope="session")
async def server_url() -> AsyncIterator[str]:
    """The configured server, else the embedded one, stopped at the end if this started it;
    with the session's migrated template on it while the session lasts."""
    home = _session_home()
    was_running = home is not None and await asyncio.to_thread(_running, home) is not None
    url = await asyncio.to_thread(resolve_url)
    async with migrated_template(url):
        yield url
    if home is not None and not was_running:
        await asyncio.to_thread(stop_server, home)


@pytest.fixture(scope="session")
async def database_url(server_url: str) -> AsyncIterator[str]:
    """The session's database; its directory lists `SUITE_REVIEWERS`."""
    async with scratch_database(server_url, prefix="signoff_test") as url:
        await list_reviewers(url)
        yield url


@pytest.fixture
async def fresh_database_url(server_url: str) -> AsyncIterator[str]:
    """A database of its own, for tests that damage or reshape it."""
    async with scratch_database(server_url, prefix="signoff_test") as url:
        yield url


@pytest.fixture(params=["direct", "pgbouncer-session"])
async def route(
    request: pytest.FixtureRequest, server_url: str
) -> AsyncIterator[Callable[[str], str]]:
    """How the processes of a multi-process test reach the server: directly, or through
    PgBouncer in session mode (each process's URL goes through `route`); the test runs both."""
    if request.param == "direct":
        yield lambda url: url
        return
    async with pgbouncer(server_url, "session") as through:
        yield through


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
