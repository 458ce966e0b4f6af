"""Approvals across real OS processes on a real database: consume races, token replay, waking
on a decision from the CLI, the CLI itself, and a waiter surviving a database restart. The
workers log in with only `signoff_app`; the race and the wake-up run directly and through
PgBouncer in session mode (`route`)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from approvals import NOTIFY_CHANNEL, ApprovalStatus, ApprovalStore, Decision
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database, migrate
from ledger.store.embedded import ensure_server, stop_server
from ledger.store.logins import temporary_login
from tests.support.directory import list_reviewers
from tests.support.scratch import scratch_database

from .support.activity import listeners
from .support.embedded_homes import private_home
from .support.processes import TEST_KEK, finish, kek_env, run_cli, start_program, worker_env
from .support.until import until


async def start(*args: str) -> asyncio.subprocess.Process:
    """Start `python -m tests.support.approval_workers ARGS...` with a worker's KEK in its
    environment (not the reviewer side's)."""
    return await start_program("tests.support.approval_workers", *args, env=worker_env())


async def _more(count: Awaitable[int], than: int) -> bool:
    return await count > than


class Records(logging.Handler):
    """The messages logged to the logger it is added to."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def messages(self) -> list[str]:
        return [r.getMessage() for r in self.records]


def last_json(output: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
    return data


@pytest.fixture(scope="module")
async def database_url(server_url: str) -> AsyncIterator[str]:
    """A database of this module's own (on the session's server): the session database's data
    keys may be wrapped by another module's KEK, and the child processes need ours."""
    async with scratch_database(server_url, prefix="signoff_test") as url:
        await list_reviewers(url)
        yield url


@pytest.fixture(scope="module")
async def worker_url(database_url: str, store: ApprovalStore) -> AsyncIterator[str]:
    """A login on it with only `signoff_app` (after the owner made the data keys)."""
    async with temporary_login(database_url, "signoff_app") as url:
        yield url


@pytest.fixture(scope="module")
async def store(database_url: str) -> AsyncIterator[ApprovalStore]:
    db = await Database.connect(database_url)
    approval_store = ApprovalStore(db, await KeyRing.open(db, LocalKek(TEST_KEK)))
    yield approval_store
    await approval_store.close()
    await db.close()


CALL_ARGS = {"order": "A-1", "amount": 120, "note": "SECRET-ARG"}


async def ask(store: ApprovalStore, run_id: str | None = None) -> tuple[str, dict[str, Any]]:
    call: dict[str, Any] = {
        "run_id": run_id or f"run-{uuid.uuid4().hex[:8]}",
        "tool": "refund",
        "args": CALL_ARGS,
        "call_id": f"call-{uuid.uuid4().hex[:6]}",
    }
    approval = await store.request(**call, requested_by="agent")
    return approval.approval_id, call


async def test_eight_processes_race_to_consume_one_decision(
    store: ApprovalStore, worker_url: str, route: Callable[[str], str]
) -> None:
    approval_id, _ = await ask(store)
    await store.decide(approval_id, Decision.approve(), "alice")
    start_at = time.time() + 3.0
    racers = [
        await start("consume", route(worker_url), approval_id, f"task-{i}", str(start_at))
        for i in range(8)
    ]
    results = [last_json(out) for out in await asyncio.gather(*(finish(p) for p in racers))]
    winners = [r for r in results if r["result"] == "consumed"]
    losers = [r for r in results if r["result"] != "consumed"]
    assert len(winners) == 1, results
    assert winners[0]["decision"] == "approve"
    assert len(losers) == 7
    assert {r["error"] for r in losers} == {"ApprovalAlreadyDecided"}, losers
    approval = await store.get(approval_id)
    assert approval.consumed_by == winners[0]["consumed_by"]
    events = await store.journal.read_stream(f"approval:{approval_id}")
    assert [e.type for e in events].count("approval.consumed") == 1


async def test_token_replayed_in_another_process_is_refused(
    store: ApprovalStore, database_url: str
) -> None:
    approval_id, call = await ask(store)
    await store.decide(approval_id, Decision.approve(), "alice")
    token = await store.issue_token(approval_id)
    first = last_json(
        await finish(await start("redeem", database_url, token, json.dumps(call), "A"))
    )
    assert first["result"] == "consumed", first
    replay = last_json(
        await finish(await start("redeem", database_url, token, json.dumps(call), "-"))
    )
    assert replay["result"] == "error"
    assert replay["error"] == "ApprovalAlreadyDecided", replay
    assert (await store.get(approval_id)).consumed_by == "A"


async def test_wait_in_one_process_wakes_on_cli_decision_in_another(
    store: ApprovalStore, database_url: str, worker_url: str, route: Callable[[str], str]
) -> None:
    approval_id, _ = await ask(store)
    async with store.db.connection() as conn:
        before = await listeners(conn, NOTIFY_CHANNEL)
        # No poll within its 60 s: only the decision's notification can wake it in time.
        waiter = await start("wait", route(worker_url), approval_id, "60", "3600")
        assert waiter.stdout is not None
        ready = await asyncio.wait_for(waiter.stdout.readline(), 60)
        assert ready.strip() == b"ready"
        # Decided once the waiter listens: it must be woken, not find the decision at start.
        await until(
            lambda: _more(listeners(conn, NOTIFY_CHANNEL), before), what="the waiter listens"
        )
    decided = await run_cli(
        "approvals", "decide", approval_id, "--approve", "--by", "bob", "--json",
        database_url=route(database_url), env=kek_env(),
    )  # fmt: skip
    assert decided.code == 0, decided.stderr
    assert json.loads(decided.stdout)["status"] == "approved"
    result = last_json(await finish(waiter))
    print(f"waiter in another process waited {result['waited']:.3f} s for the CLI decision")
    assert result["status"] == "approved"
    assert result["decided_by"] == ["bob"]
    # Woke on the decision, far before its 60 s. (No lower bound: the decision now follows the
    # waiter's LISTEN as soon as it is seen, and a CLI process may decide within 0.5 s.)
    assert result["waited"] < 20, result


async def test_cli_list_show_and_decide(store: ApprovalStore, database_url: str) -> None:
    run = f"run-{uuid.uuid4().hex[:8]}"
    approval_id, _ = await ask(store, run)
    env = kek_env()

    listed = await run_cli(
        "approvals", "list", "--status", "pending", "--run", run, "--json",
        database_url=database_url, env=env,
    )  # fmt: skip
    assert listed.code == 0, listed.stderr
    rows = json.loads(listed.stdout)["approvals"]
    assert [r["approval_id"] for r in rows] == [approval_id]
    assert rows[0]["status"] == "pending"
    assert "SECRET-ARG" not in listed.stdout

    no_kek = {k: v for k, v in env.items() if k not in ("SIGNOFF_KEK", "SIGNOFF_KEK_FILE")}
    hidden = await run_cli("approvals", "show", approval_id, database_url=database_url, env=no_kek)
    assert hidden.code == 0, hidden.stderr
    assert "SECRET-ARG" not in hidden.stdout
    shown = await run_cli(
        "approvals", "show", approval_id, "--reveal", "--json", database_url=database_url, env=env
    )
    assert shown.code == 0, shown.stderr
    assert json.loads(shown.stdout)["args"] == CALL_ARGS
    locked = await run_cli(
        "approvals", "show", approval_id, "--reveal", database_url=database_url, env=no_kek
    )
    assert locked.code == 2 and "SECRET-ARG" not in locked.stdout + locked.stderr, locked

    bad = await run_cli(
        "approvals", "decide", approval_id, "--edit", "{not json", "--by", "bob",
        database_url=database_url, env=env,
    )  # fmt: skip
    assert bad.code == 2
    assert bad.stderr.startswith("error: ") and "--edit" in bad.stderr, bad.stderr
    not_object = await run_cli(
        "approvals", "decide", approval_id, "--edit", "[1, 2]", "--by", "bob",
        database_url=database_url, env=env,
    )  # fmt: skip
    assert not_object.code == 2 and "JSON object" in not_object.stderr, not_object.stderr
    approval = await store.get(approval_id)
    assert approval.status is ApprovalStatus.PENDING and approval.reviews == ()
    assert approval.version == 1  # only the request event: nothing recorded

    unknown = await run_cli("approvals", "show", "apr-nope", database_url=database_url, env=env)
    assert unknown.code == 2 and unknown.stderr.startswith("error: "), unknown.stderr
    unknown_decide = await run_cli(
        "approvals", "decide", "apr-nope", "--approve", "--by", "bob",
        database_url=database_url, env=env,
    )  # fmt: skip
    assert unknown_decide.code == 2 and "no such approval" in unknown_decide.stderr

    edited = await run_cli(
        "approvals", "decide", approval_id, "--edit", '{"order": "A-1", "amount": 60}',
        "--by", "bob", "--json", database_url=database_url, env=env,
    )  # fmt: skip
    assert edited.code == 0, edited.stderr
    assert json.loads(edited.stdout)["status"] == "edited"
    again = await run_cli(
        "approvals", "decide", approval_id, "--approve", "--by", "carol",
        database_url=database_url, env=env,
    )  # fmt: skip
    assert again.code == 2 and "already" in again.stderr, again.stderr
    consumed = await store.consume(approval_id, "task-1")
    assert consumed.decision == Decision.edit({"order": "A-1", "amount": 60})


@pytest.fixture
def home() -> Iterator[Path]:
    """A private embedded server's home; its server is stopped afterwards, whatever happened."""
    with private_home() as home:
        yield home


async def test_waiter_survives_a_database_restart(home: Path) -> None:
    url = await asyncio.to_thread(ensure_server, home)
    await asyncio.to_thread(migrate.upgrade, url)
    await list_reviewers(url)
    db = await Database.connect(url, pool_size=2)
    store = ApprovalStore(db, await KeyRing.open(db, LocalKek(TEST_KEK)), poll_interval=0.2)
    try:
        approval_id, _ = await ask(store)
        waiter = asyncio.create_task(store.wait(approval_id, 30))
        async with db.connection() as conn:
            await until(lambda: _more(listeners(conn, NOTIFY_CHANNEL), 0), what="it listens")
        assert not waiter.done()
        handler, logger = Records(), logging.getLogger("signoff")
        logger.addHandler(handler)
        try:
            await asyncio.to_thread(stop_server, home)
            # The waiter polls the server that is down, and says so.
            await until(lambda: "approval wait: database unavailable" in handler.messages())
        finally:
            logger.removeHandler(handler)
        assert not waiter.done(), waiter  # an error escaping the wait loop would end it here
        assert await asyncio.to_thread(ensure_server, home) == url
        started = time.monotonic()
        decided = await run_cli(
            "approvals", "decide", approval_id, "--approve", "--by", "bob",
            database_url=url, env=kek_env(),
        )  # fmt: skip
        assert decided.code == 0, decided.stderr
        approval = await asyncio.wait_for(waiter, 30)
        assert approval.status is ApprovalStatus.APPROVED
        assert approval.decided_by == ("bob",)
        assert time.monotonic() - started < 20
    finally:
        await store.close()
        await db.close()
