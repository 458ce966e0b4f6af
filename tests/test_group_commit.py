"""Group commit (`ledger.store.group`): steps committed on their own that arrive together share
a statement and a transaction, and each caller still gets its own result or its own error."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import pytest

from ledger import DatabaseUnavailable, VersionConflict
from ledger.calls import CallContext, CallStatus, ToolCall, ToolLedger
from ledger.journal import Journal, NewEvent
from ledger.journal._sql import APPEND_CALL as _APPEND_CALL
from ledger.journal.journal import append_arguments
from ledger.store import Database
from ledger.store.db import open_raw_connection
from ledger.store.group import HELD_GROUPS, GroupedCalls

from .support.until import until

EVENT = NewEvent("test.grouped", {"n": 1}, actor="tester")


def stream() -> str:
    return f"group:{uuid.uuid4().hex}"


async def txids(db: Database, streams: list[str]) -> list[int]:
    async with db.connection() as conn:
        rows = await conn.fetch(
            "SELECT txid::text::bigint FROM events WHERE stream_id = ANY($1::text[])", streams
        )
    return [r[0] for r in rows]


async def test_concurrent_appends_share_transactions_and_each_gets_its_own_result(
    db: Database,
) -> None:
    journal = Journal(db)
    streams = [stream() for _ in range(8)]
    appended = await asyncio.gather(
        *(journal.append(s, [EVENT], expected_version=0) for s in streams)
    )
    assert [a.stream_id for a in appended] == streams
    assert all(a.version == 1 and len(a.positions) == 1 for a in appended)
    # Each append alone would have been a transaction of its own.
    assert len(set(await txids(db, streams))) < len(streams)
    for s in streams:
        assert [e.version for e in await journal.read_stream(s)] == [1]


async def test_a_refused_step_fails_alone_and_the_others_of_its_group_commit(db: Database) -> None:
    journal = Journal(db)
    streams = [stream() for _ in range(4)]
    results = await asyncio.gather(
        *(
            journal.append(s, [EVENT], expected_version=5 if i == 2 else 0)
            for i, s in enumerate(streams)
        ),
        return_exceptions=True,
    )
    assert isinstance(results[2], VersionConflict)
    assert [type(r).__name__ for i, r in enumerate(results) if i != 2] == ["Appended"] * 3
    for i, s in enumerate(streams):
        assert len(await journal.read_stream(s)) == (0 if i == 2 else 1)


async def held_stream(db: Database) -> tuple[str, asyncpg.Connection]:
    """A stream whose first version another transaction holds: an append to it waits."""
    blocked = stream()
    holder = await open_raw_connection(db.url)
    await holder.execute("BEGIN")
    args = append_arguments(blocked, [EVENT], 0)
    await holder.fetchval(f"SELECT {_APPEND_CALL}", *args, None)
    return blocked, holder


def senders() -> list[asyncio.Task[Any]]:
    """The group-commit senders running in this event loop (named so by `GroupedCalls`)."""
    return [t for t in asyncio.all_tasks() if t.get_name() == "signoff-group-commit"]


async def waiting_on_lock(db: Database) -> int:
    """The pid of the backend whose group waits on the held stream."""
    async with db.connection() as conn:
        for _ in range(200):
            pid = await conn.fetchval(
                "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND query LIKE 'SELECT signoff_append(%' AND datname = current_database()"
            )
            if pid is not None:
                return int(pid)
            await asyncio.sleep(0.02)
    raise AssertionError("no group waited on the held stream")


async def test_a_step_whose_caller_was_cancelled_before_it_was_sent_is_not_written(
    db: Database,
) -> None:
    group = GroupedCalls(db, _APPEND_CALL, in_flight=1)
    blocked, holder = await held_stream(db)
    try:
        first = asyncio.create_task(
            group.call(blocked, (*append_arguments(blocked, [EVENT], 0), None))
        )
        await waiting_on_lock(db)  # the only group in flight waits
        dropped = stream()
        queued = asyncio.create_task(
            group.call(dropped, (*append_arguments(dropped, [EVENT], 0), None))
        )
        await asyncio.sleep(0)  # one turn of the loop: its call is queued behind the first
        queued.cancel()
        await holder.execute("ROLLBACK")  # the first group goes on
        assert await first is not None
        with pytest.raises(asyncio.CancelledError):
            await queued
    finally:
        await holder.close()
    assert await txids(db, [dropped]) == []
    assert len(await txids(db, [blocked])) == 1


async def test_a_step_whose_caller_left_while_its_sender_waited_for_a_connection_is_not_sent(
    db: Database,
) -> None:
    async with await Database.connect(db.url, pool_size=4) as small:
        group = GroupedCalls(small, _APPEND_CALL)  # 2 senders at most: half the pool
        first, holder = await held_stream(small)
        left = stream()
        try:
            alone = asyncio.create_task(
                group.call(first, (*append_arguments(first, [EVENT], 0), None))
            )
            await waiting_on_lock(small)  # one connection, in flight
            taken = [await small.pool.acquire() for _ in range(3)]  # the rest of the pool
            try:
                queued = asyncio.create_task(
                    group.call(left, (*append_arguments(left, [EVENT], 0), None))
                )
                await until(lambda: bool(senders()), what="a sender for it")
                await asyncio.sleep(0)  # its turn: the sender takes it, waits for a connection
                queued.cancel()
                await asyncio.wait([queued])
            finally:
                for conn in taken:
                    await small.pool.release(conn)
            await holder.execute("ROLLBACK")
            assert await alone is not None
            # Once no sender is left, the one that held the step has sent it or dropped it.
            await until(lambda: not senders(), what="every sender done")
        finally:
            await holder.close()
        assert queued.cancelled()
        assert await txids(small, [left]) == []


async def test_a_connection_lost_under_a_group_fails_every_step_of_it(db: Database) -> None:
    group = GroupedCalls(db, _APPEND_CALL, in_flight=1)
    first, first_holder = await held_stream(db)
    blocked, holder = await held_stream(db)
    streams = [stream(), blocked, stream()]
    try:
        # The first step goes alone and waits; the three queue behind it and, once it is
        # through, go as one group, which waits on the other held stream.
        alone = asyncio.create_task(group.call(first, (*append_arguments(first, [EVENT], 0), None)))
        await waiting_on_lock(db)
        steps = [
            asyncio.create_task(group.call(s, (*append_arguments(s, [EVENT], 0), None)))
            for s in streams
        ]
        await asyncio.sleep(0)  # one turn of the loop: the three calls are queued
        await first_holder.execute("ROLLBACK")
        assert await alone is not None
        pid = await waiting_on_lock(db)
        killer = await open_raw_connection(db.url)
        try:
            assert await killer.fetchval("SELECT pg_terminate_backend($1, 5000)", pid)
        finally:
            await killer.close()
        results = await asyncio.gather(*steps, return_exceptions=True)
    finally:
        await first_holder.close()
        await holder.close()
    assert [type(r) for r in results] == [DatabaseUnavailable] * 3
    assert await txids(db, streams) == []


async def test_calls_made_together_share_commits_and_keep_every_guarantee(
    db: Database, ledger: ToolLedger
) -> None:
    run_id = f"grouped-{uuid.uuid4().hex[:8]}"
    ran: list[int] = []

    async def tool(args: dict[str, Any], context: CallContext) -> int:
        ran.append(args["n"])
        return int(args["n"]) * 2

    calls = [ToolCall(run_id, f"c{n}", "double", {"n": n}) for n in range(8)]
    outcomes = await asyncio.gather(*(ledger.execute(c, tool) for c in calls))
    assert [o.result for o in outcomes] == [n * 2 for n in range(8)]
    assert all(o.status is CallStatus.SUCCEEDED and not o.replayed for o in outcomes)
    assert sorted(ran) == list(range(8))
    streams = [(await ledger.get(run_id, c.call_id)).stream_id for c in calls]
    # 8 intents and 8 outcomes, each alone a transaction of its own.
    assert len(set(await txids(db, streams))) < 16
    again = await asyncio.gather(*(ledger.execute(c, tool) for c in calls))
    assert all(o.replayed and o.result == n * 2 for n, o in enumerate(again))
    assert len(ran) == 8
    assert await ledger.verify_projection() == []


async def test_a_sender_that_keeps_its_connection_long_hands_every_step_on(db: Database) -> None:
    # Groups of one, one sender: 3 * HELD_GROUPS groups queue behind each other, so the sender
    # gives its connection back twice and takes one again with steps in hand.
    group = GroupedCalls(db, _APPEND_CALL, most=1, in_flight=1)
    streams = [stream() for _ in range(3 * HELD_GROUPS)]
    results = await asyncio.wait_for(
        asyncio.gather(*(group.call(s, (*append_arguments(s, [EVENT], 0), None)) for s in streams)),
        timeout=60,
    )
    assert all(r is not None for r in results)
    assert len(set(await txids(db, streams))) == len(streams)
