"""One LISTEN connection per database and process: the listeners a `signoff serve` process holds
(the tool ledger's, the approval store's, the live feed's and the webhooks') share it, and each
of their waiters still wakes on a notification alone (every poll interval here is an hour).

On a private server: the journal's horizon is the whole server's, and a transaction another user
leaves open on a shared one would hide a notified event from a reader until its next poll."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from adapters.http.live import ApprovalChange, ApprovalFeed
from adapters.http.webhooks import Webhooks
from approvals import ApprovalPolicy, ApprovalStore, Decision
from ledger.calls.model import CallContext, CallStatus, ToolCall
from ledger.calls.service import ToolLedger
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database, migrate
from ledger.store.embedded import ensure_server
from ledger.store.notify import Listener
from ledger.store.settings import Settings, WebhookSettings

from .support.embedded_homes import private_home
from .support.processes import TEST_KEK, TEST_REVIEWER_KEK

GUARD = 60.0  # seconds before a stuck wait fails the test; the polls would take an hour
HOUR = 3600.0
_LISTENING = (
    "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN %'"
)


_CALL = "SELECT EXISTS (SELECT FROM tool_calls WHERE run_id = $1 AND call_id = 'c1' AND "
_DELIVERIES = "SELECT EXISTS (SELECT FROM webhook_deliveries WHERE target = $1)"


def named(url: str, application: str) -> str:
    """`url` with an `application_name`, so that this process's connections can be counted."""
    return f"{url}{'&' if '?' in url else '?'}application_name={application}"


@pytest.fixture
async def application() -> str:
    return f"signoff-listen-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
async def private_url() -> AsyncIterator[str]:
    with private_home() as home:
        url = await asyncio.to_thread(ensure_server, Path(home))
        await asyncio.to_thread(migrate.upgrade, url)
        yield url


@pytest.fixture
async def own(private_url: str) -> AsyncIterator[tuple[Database, KeyRing, ApprovalStore]]:
    """Another process's database, key ring and approval store (the owner's)."""
    database = await Database.connect(private_url, pool_size=2)
    ring = await KeyRing.open(database, LocalKek(TEST_KEK))
    store = ApprovalStore(database, ring, poll_interval=HOUR)
    yield database, ring, store
    await store.close()
    await database.close()


@pytest.fixture
async def serve_db(
    private_url: str, application: str, own: tuple[Database, KeyRing, ApprovalStore]
) -> AsyncIterator[Database]:
    settings = Settings(
        database_url=named(private_url, application),
        kek=LocalKek(TEST_KEK),
        reviewer_kek=LocalKek(TEST_REVIEWER_KEK),
    )
    database = await Database.from_settings(settings, pool_size=4)
    yield database
    await database.close()


async def listening(db: Database, application: str) -> int:
    return int(await value(db, _LISTENING, application))


async def value(db: Database, query: str, *args: Any) -> Any:
    async with db.connection() as conn:
        return await conn.fetchval(query, *args)


async def until_true(db: Database, query: str, *args: Any) -> None:
    """Return once `query` answers true; fail the test when it has not within `GUARD`."""
    async with asyncio.timeout(GUARD):
        while True:
            if await value(db, query, *args):
                return
            await asyncio.sleep(0.05)


async def test_a_serve_process_holds_one_listen_connection_and_every_waiter_wakes(
    serve_db: Database, application: str, own: tuple[Database, KeyRing, ApprovalStore]
) -> None:
    db, ring, store = own
    serve_ring = await KeyRing.open(serve_db)
    approvals = ApprovalStore(serve_db, serve_ring, poll_interval=HOUR)
    ledger = ToolLedger(serve_db, serve_ring, poll_interval=HOUR)
    feed = ApprovalFeed(serve_db, poll_interval=HOUR)
    target = f"http://127.0.0.1:9/hooks/{application}"  # nothing listens: only recorded
    webhooks = Webhooks(
        serve_db,
        approvals,
        WebhookSettings(target, "s" * 32, first_retry_seconds=HOUR),
        poll_interval=HOUR,
    )
    # Another process's worker runs a call and holds it until released.
    worker = ToolLedger(db, ring, poll_interval=HOUR)
    release = asyncio.Event()
    run_id = f"listen-{uuid.uuid4().hex[:8]}"
    call = ToolCall(run_id, "c1", "refund", {"amount": 5})

    async def slow_refund(args: dict[str, Any], context: CallContext) -> str:
        await release.wait()
        return "refunded"

    async def quick(args: dict[str, Any], context: CallContext) -> str:
        raise AssertionError("ran twice")

    try:
        await webhooks.start()
        changes = feed.changes(since=None)
        first_change: asyncio.Task[ApprovalChange] = asyncio.create_task(anext(changes))
        await feed.listen()
        running = asyncio.create_task(worker.execute(call, slow_refund))
        await until_true(db, _CALL + "status = 'running')", run_id)
        waited = asyncio.create_task(ledger.execute(call, quick))
        await until_true(db, _CALL + "waiters > 0)", run_id)  # the serve process waits for it

        approval = await store.request(
            run_id=run_id,
            tool="refund",
            args={"amount": 5},
            call_id="c2",
            requested_by="agent",
            policy=ApprovalPolicy(approvers=frozenset({"bob"})),
        )
        decided = asyncio.create_task(approvals.wait(approval.approval_id, GUARD))

        # Every listener has started: the ledger's and the store's with their waits, the
        # feed's and the webhooks' before. One connection listens for all of them.
        await asyncio.wait_for(first_change, GUARD)
        assert await listening(serve_db, application) == 1

        await store.decide(approval.approval_id, Decision.approve(), "bob")
        release.set()
        assert (await asyncio.wait_for(decided, GUARD)).status.runs_tool
        outcome = await asyncio.wait_for(waited, GUARD)
        assert outcome.status is CallStatus.SUCCEEDED and outcome.replayed
        assert outcome.result == "refunded"
        await asyncio.wait_for(running, GUARD)
        await until_true(db, _DELIVERIES, target)
        assert await listening(serve_db, application) == 1
    finally:
        release.set()
        await webhooks.close()
        await feed.close()
        await ledger.close()
        await approvals.close()
        await worker.close()
    # The last listener closed: the shared connection is gone with it.
    assert await listening(serve_db, application) == 0


def test_listeners_of_one_database_share_a_connection_and_others_do_not() -> None:
    one, other = object.__new__(Database), object.__new__(Database)
    one.url = other.url = "postgresql://nobody@127.0.0.1/none"
    one.settings = other.settings = Settings(host_connect_seconds=3.0)
    a, b = Listener.shared(one, "x"), Listener.shared(one, "y")
    assert a._shared is b._shared
    assert a._shared.host_seconds == 3.0  # the database's settings'
    assert Listener.shared(other, "x")._shared is not a._shared
    assert Listener(one.url, "x")._shared is not a._shared
