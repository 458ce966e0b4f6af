"""A process that saw its calls committed refuses a database that no longer holds them (a
failover to a standby that had not received them, a restore from an older backup), rather than
run a call again or consume its approval again: `HistoryLost`, for every use from then on.

Written as it happens: the process's database is swapped, under its open pool, for a copy taken
before its last calls (the connections are ended, as a failover ends them)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest
from langchain_core.runnables import RunnableConfig

from adapters.langgraph import EncryptedPostgresSaver, encrypted_checkpointer
from ledger.calls import CallContext, ToolCall, ToolLedger, ToolPolicy
from ledger.errors import DatabaseUnavailable, HistoryLost
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.db import open_raw_connection

from .support.processes import TEST_KEK
from .support.scratch import scratch_database, with_database
from .support.until import until


@pytest.fixture
async def url(server_url: str) -> AsyncIterator[str]:
    async with scratch_database(server_url, prefix="signoff_fence") as made:
        yield made


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


async def test_a_database_without_the_calls_it_saw_is_refused(server_url: str, url: str) -> None:
    name = urlsplit(url).path.lstrip("/")
    older = f"{name}_older"
    db = await Database.connect(url, pool_size=2)
    ring = await KeyRing.open(db, LocalKek(TEST_KEK))
    ledger = ToolLedger(db, ring)
    checkpoints = encrypted_checkpointer(db, ring, max_size=1)
    saver = await checkpoints.__aenter__()
    runs: list[str] = []

    async def refund(args: dict[str, Any], context: CallContext) -> dict[str, Any]:
        runs.append(context.call_id)
        return {"refunded": args["amount"]}

    run_id = f"fence-{uuid.uuid4().hex[:8]}"
    try:
        await ledger.execute(ToolCall(run_id, "c0", "refund", {"amount": 1}), refund, ToolPolicy())
        # The backup: taken while nobody is connected, before the call that it will lack.
        await _swap_copy(server_url, name, older)
        call = ToolCall(run_id, "c1", "refund", {"amount": 2})
        await ledger.execute(call, refund, ToolPolicy())
        assert runs == ["c0", "c1"]
        await _swap(server_url, name, older)
        await refused_by_the_checkpointer(saver)
        with pytest.raises(HistoryLost) as caught:
            await ledger.execute(call, refund, ToolPolicy())
        assert runs == ["c0", "c1"], "the lost call ran again"
        assert "no longer holds events this process saw committed" in str(caught.value)
        with pytest.raises(HistoryLost):  # and everything else, from now on
            async with db.connection() as conn:
                await conn.fetchval("SELECT 1")
    finally:
        await checkpoints.__aexit__(None, None, None)
        await ledger.close()
        await db.close()
        await _admin(server_url, f'DROP DATABASE IF EXISTS "{older}" WITH (FORCE)')


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


async def test_a_reconnect_to_the_same_history_goes_on(url: str) -> None:
    """The check on a new connection finds what it saw: calls go on as before."""
    async with await Database.connect(url, pool_size=1) as db:
        ring = await KeyRing.open(db, LocalKek(TEST_KEK))
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
