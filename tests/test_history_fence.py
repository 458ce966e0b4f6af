"""A process that saw its calls committed refuses a database that no longer holds them (a
failover to a standby that had not received them, a restore from an older backup), rather than
run a call again or consume its approval again: `HistoryLost`, for every use from then on.

Written as it happens: the process's database is swapped, under its open pool, for a copy taken
before its last calls (the connections are ended, as a failover ends them)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest
from langchain_core.runnables import RunnableConfig

from adapters.langgraph import EncryptedPostgresSaver, encrypted_checkpointer
from ledger.calls import CallContext, ToolCall, ToolLedger, ToolPolicy
from ledger.errors import DatabaseUnavailable, HistoryLost, PermissionDenied, SignoffError
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.db import open_raw_connection
from ledger.store.fence import REPORT
from ledger.store.history import open_loss, settle_loss
from ledger.store.logins import temporary_login

from .support.processes import TEST_KEK, run_cli
from .support.scratch import scratch_database, with_database
from .support.until import until


@pytest.fixture
async def url(server_url: str) -> AsyncIterator[str]:
    async with scratch_database(server_url, prefix="signoff_fence") as made:
        yield made


@pytest.fixture
async def worker_url(url: str) -> AsyncIterator[str]:
    """A login on `url` with only `signoff_app` (the owner made the data keys first)."""
    async with await Database.connect(url) as owner:
        await KeyRing.open(owner, LocalKek(TEST_KEK))
    async with temporary_login(url, "signoff_app") as login:
        yield login


async def _admin(server_url: str, *statements: str) -> None:
    admin = await open_raw_connection(with_database(server_url, "postgres"))
    try:
        for statement in statements:
            await admin.execute(statement)
    finally:
        await admin.close()


async def _swap(server_url: str, name: str, older: str) -> None:
    """Put `older` where `name` was (the process's pool reconnects to it), ending every session
    of `name` first; the pool may reconnect between, so until the renames go through."""
    gone = f"{name}_gone"

    async def swapped() -> bool:
        try:
            await _admin(
                server_url,
                f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'",
                f'ALTER DATABASE "{name}" RENAME TO "{gone}"',
            )
        except asyncpg.ObjectInUseError:
            return False
        await _admin(server_url, f'ALTER DATABASE "{older}" RENAME TO "{name}"')
        return True

    await until(swapped, 30, "the database swapped for its older copy")
    await _admin(server_url, f'DROP DATABASE "{gone}" WITH (FORCE)')


async def test_a_database_without_the_calls_it_saw_is_refused(
    server_url: str, url: str, worker_url: str
) -> None:
    name = urlsplit(url).path.lstrip("/")
    older = f"{name}_older"
    try:
        await _lose_and_settle(server_url, url, worker_url, name, older)
    finally:
        await _admin(server_url, f'DROP DATABASE IF EXISTS "{older}" WITH (FORCE)')


async def _lose_and_settle(
    server_url: str, url: str, worker_url: str, name: str, older: str
) -> None:
    """A worker sees its calls committed, the database loses the last one: the worker refuses
    and records the loss; a process started afterwards is refused by the database until the
    owner settles the loss."""
    db = await Database.connect(worker_url, pool_size=2)
    ring = await KeyRing.open(db, LocalKek(TEST_KEK), create_missing=False)
    ledger = ToolLedger(db, ring)
    checkpoints = encrypted_checkpointer(db, ring, max_size=1)
    saver = await checkpoints.__aenter__()
    runs: list[str] = []

    async def refund(args: dict[str, Any], context: CallContext) -> dict[str, Any]:
        runs.append(context.call_id)
        return {"refunded": args["amount"]}

    run_id = f"fence-{uuid.uuid4().hex[:8]}"
    call = ToolCall(run_id, "c1", "refund", {"amount": 2})
    try:
        await ledger.execute(ToolCall(run_id, "c0", "refund", {"amount": 1}), refund, ToolPolicy())
        # The backup: taken while nobody is connected, before the call that it will lack.
        await _swap_copy(server_url, name, older)
        await ledger.execute(call, refund, ToolPolicy())
        assert runs == ["c0", "c1"]
        await _swap(server_url, name, older)
        await refused_by_the_checkpointer(saver)
        with pytest.raises(HistoryLost) as caught:
            await ledger.execute(call, refund, ToolPolicy())
        assert runs == ["c0", "c1"], "the lost call ran again"
        assert "no longer holds events this process saw committed" in str(caught.value)
        assert "recorded as loss" in str(caught.value)
        with pytest.raises(HistoryLost):  # and everything else, from now on
            async with db.connection() as conn:
                await conn.fetchval("SELECT 1")
    finally:
        await checkpoints.__aexit__(None, None, None)
        await ledger.close()
        await db.close()

    listed = await run_cli("db", "history", "--json", database_url=url)
    assert listed.code == 1, listed.stderr  # a loss is open
    [loss] = json.loads(listed.stdout)["losses"]
    assert loss["open"] and loss["missing"], loss
    assert loss["found_by"] == urlsplit(worker_url).username

    # A process started afterwards has seen nothing, and the database refuses it.
    async with await Database.connect(worker_url) as fresh:
        later = ToolLedger(
            fresh, await KeyRing.open(fresh, LocalKek(TEST_KEK), create_missing=False)
        )
        try:
            for again in (call, ToolCall(run_id, "c2", "refund", {"amount": 3})):
                with pytest.raises(HistoryLost, match="SG410"):
                    await later.execute(again, refund, ToolPolicy())
            assert runs == ["c0", "c1"], "a call started while the loss was open"
            with pytest.raises(PermissionDenied):  # only the owner settles
                await settle_loss(fresh, "not mine to settle")

            settled = await run_cli(
                "db", "history", "settle", "--reason", "c1 checked by hand", database_url=url
            )
            assert settled.code == 0, settled.stderr
            assert "settled" in settled.stdout and "c1 checked by hand" in settled.stdout
            outcome = await later.execute(call, refund, ToolPolicy())
            assert str(outcome.status) == "succeeded"
            assert runs == ["c0", "c1", "c1"], "settled: the lost call is unknown, and runs"
            # The same report again (a process from before that reconnects) opens nothing.
            owner = await open_raw_connection(url)
            try:
                seen = await owner.fetchrow("SELECT missing, hashes FROM history_losses")
            finally:
                await owner.close()
            async with fresh.connection() as conn:
                assert await conn.fetchval(REPORT, seen["missing"], seen["hashes"]) is None
            assert await later.execute(ToolCall(run_id, "c3", "refund", {"amount": 4}), refund)

        finally:
            await later.close()
    twice = await run_cli("db", "history", "settle", "--reason", "twice", database_url=url)
    assert twice.code == 2 and twice.stderr.count("\n") == 1, twice.stderr
    assert "no loss of committed history is open" in twice.stderr


async def test_an_operator_records_a_loss_found_another_way(url: str, worker_url: str) -> None:
    """A loss no running process saw (every worker restarted before it reconnected) is found
    by a digest taken before; the owner records it and no call starts until it is settled."""
    async with await Database.connect(url) as db, await Database.connect(worker_url) as worker:
        ring = await KeyRing.open(worker, LocalKek(TEST_KEK), create_missing=False)
        ledger = ToolLedger(worker, ring)
        ran: list[str] = []

        async def tool(args: dict[str, Any], context: CallContext) -> dict[str, Any]:
            ran.append(context.call_id)
            return {}

        run_id = f"fence-{uuid.uuid4().hex[:8]}"
        try:
            recorded = await run_cli(
                "db", "history", "record", "--reason", "the 03:00 digest fails", database_url=url
            )
            assert recorded.code == 0, recorded.stderr
            assert (await open_loss(db)) is not None
            down = await run_cli("db", "downgrade", database_url=url)
            assert down.code == 2 and "settle it" in down.stderr, down.stderr
            twice = await run_cli("db", "history", "record", "--reason", "again", database_url=url)
            assert twice.code == 0 and "this reason was not recorded" in twice.stdout
            with pytest.raises(HistoryLost):
                await ledger.execute(ToolCall(run_id, "c0", "noop", {}), tool, ToolPolicy())
            assert ran == []
            with pytest.raises(SignoffError, match="reason"):
                await settle_loss(db, "  ")
            assert (await settle_loss(db, "nothing was lost after all")).settled_by
            await ledger.execute(ToolCall(run_id, "c0", "noop", {}), tool, ToolPolicy())
            assert ran == ["c0"]
        finally:
            await ledger.close()


async def refused_by_the_checkpointer(saver: EncryptedPostgresSaver) -> None:
    """The checkpointer's own connections (psycopg) are checked too: it refuses before the
    library's pool has met the database again (its first try may meet the dead connection)."""
    config: RunnableConfig = {"configurable": {"thread_id": "fence", "checkpoint_ns": ""}}
    refused: list[HistoryLost] = []

    async def answered() -> bool:
        try:
            await saver.aget_tuple(config)
        except DatabaseUnavailable:
            return False
        except HistoryLost as e:
            refused.append(e)
        return True

    await until(answered, 30, "the checkpointer's answer")
    assert refused, "the checkpointer read a database that lost what this process saw"


async def _swap_copy(server_url: str, name: str, copy: str) -> None:
    """`copy`: `name` as it is now (every session of it ended, so it can be copied)."""

    async def copied() -> bool:
        try:
            await _admin(
                server_url,
                f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'",
                f'CREATE DATABASE "{copy}" TEMPLATE "{name}"',
            )
        except asyncpg.ObjectInUseError:
            return False
        return True

    await until(copied, 30, "a copy of the database")


async def test_a_reconnect_to_the_same_history_goes_on(url: str, worker_url: str) -> None:
    """The check on a new connection finds what it saw: calls go on as before."""
    async with await Database.connect(worker_url, pool_size=1) as db:
        ring = await KeyRing.open(db, LocalKek(TEST_KEK), create_missing=False)
        ledger = ToolLedger(db, ring)

        async def tool(args: dict[str, Any], context: CallContext) -> dict[str, Any]:
            return {}

        run_id = f"fence-{uuid.uuid4().hex[:8]}"
        try:
            await ledger.execute(ToolCall(run_id, "c0", "noop", {}), tool, ToolPolicy())
            killer = await open_raw_connection(url)
            try:
                await killer.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            finally:
                await killer.close()
            done: list[str] = []

            async def went_on() -> bool:  # the dead connection's first use may be the one
                try:
                    outcome = await ledger.execute(ToolCall(run_id, "c1", "noop", {}), tool)
                except DatabaseUnavailable:
                    return False
                done.append(str(outcome.status))
                return True

            await until(went_on, 30, "a call on a new connection")
            assert done == ["succeeded"]
        finally:
            await ledger.close()


async def test_outcomes_met_by_a_lost_history_are_refused(
    server_url: str, url: str, worker_url: str
) -> None:
    """The history is lost while tools run: recording their outcomes (group commits, the
    second queued behind the first) meets the lost history on a new connection, and each
    `execute` raises `HistoryLost`, not a cancellation."""
    name = urlsplit(url).path.lstrip("/")
    older = f"{name}_older"
    db = await Database.connect(worker_url, pool_size=4)
    ledger = ToolLedger(db, await KeyRing.open(db, LocalKek(TEST_KEK), create_missing=False))
    run_id = f"fence-{uuid.uuid4().hex[:8]}"
    swapped = asyncio.Event()
    running: list[str] = []

    async def noop(args: dict[str, Any], context: CallContext) -> dict[str, Any]:
        return {}

    async def after_the_loss(args: dict[str, Any], context: CallContext) -> dict[str, Any]:
        running.append(context.call_id)
        await swapped.wait()
        return {}

    async def lose_history() -> None:
        await until(lambda: len(running) == 2, 30, "both tools running")
        await _swap(server_url, name, older)
        swapped.set()

    try:
        await ledger.execute(ToolCall(run_id, "c0", "noop", {}), noop, ToolPolicy())
        await _swap_copy(server_url, name, older)  # lacks c1
        await ledger.execute(ToolCall(run_id, "c1", "noop", {}), noop, ToolPolicy())
        answers = await asyncio.gather(
            *(
                ledger.execute(ToolCall(run_id, c, "wait", {}), after_the_loss, ToolPolicy())
                for c in ("c2", "c3")
            ),
            lose_history(),
            return_exceptions=True,
        )
        assert [type(a).__name__ for a in answers[:2]] == ["HistoryLost", "HistoryLost"], answers
    finally:
        await ledger.close()
        await db.close()
        await _admin(server_url, f'DROP DATABASE IF EXISTS "{older}" WITH (FORCE)')


async def test_a_workers_report_is_checked_and_names_its_login(url: str, worker_url: str) -> None:
    """What a worker's login can do with the report: name a position and the hash it saw.
    Malformed, it is refused; naming an event as it is, nothing is recorded; naming a wrong
    hash opens a loss in the worker's name (a denial of service the trust model allows)."""
    owner = await open_raw_connection(url)
    worker = await open_raw_connection(worker_url)
    try:
        async with await Database.connect(worker_url) as db:
            ledger = ToolLedger(
                db, await KeyRing.open(db, LocalKek(TEST_KEK), create_missing=False)
            )
            try:
                await ledger.execute(ToolCall("attack", "c0", "noop", {}), _noop, ToolPolicy())
            finally:
                await ledger.close()
        position, hash_hex = await owner.fetchrow(
            "SELECT position, encode(hash, 'hex') FROM events ORDER BY position DESC LIMIT 1"
        )
        for positions, hashes in (([1], ["zz"]), ([None], [None]), ([1, 2], ["0" * 64])):
            with pytest.raises(asyncpg.InvalidParameterValueError):
                await worker.fetchval(REPORT, positions, hashes)
        assert await worker.fetchval(REPORT, [position], [hash_hex]) is None
        with pytest.raises(asyncpg.InsufficientPrivilegeError):  # no reading of the losses
            await worker.fetchval("SELECT count(*) FROM history_losses")
        opened = await worker.fetchval(REPORT, [position], ["0" * 64])
        row = await owner.fetchrow("SELECT loss_id, found_by, missing FROM history_losses")
        assert (row["loss_id"], row["found_by"], row["missing"]) == (
            opened,
            urlsplit(worker_url).username,
            [position],
        )
    finally:
        await worker.close()
        await owner.close()


async def _noop(args: dict[str, Any], context: CallContext) -> dict[str, Any]:
    return {}
