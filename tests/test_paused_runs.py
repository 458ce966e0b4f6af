"""Paused runs kept server-side: sealed, resumed once by one worker, taken over when the
resuming worker's lease lapses, written by a worker login through the functions alone."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import asyncpg
import pytest

from ledger.keys import KeyRing, LocalKek
from ledger.pauses import PausedRuns, PauseTaken, UnknownPause
from ledger.store import Database
from tests.support.processes import TEST_KEK
from tests.support.worker_login import WorkerLogin, worker_login

STATE = json.dumps({"messages": ["refund A-1042 please"], "secret": "tok-123"})


@pytest.fixture(scope="module")
async def login(server_url: str) -> AsyncIterator[WorkerLogin]:
    async with worker_login(server_url, LocalKek(TEST_KEK), prefix="signoff_pauses") as made:
        yield made


async def worker(login: WorkerLogin, lease: float = 60.0) -> tuple[Database, PausedRuns]:
    db = await Database.connect(login.url, settings=login.settings)
    return db, PausedRuns(db, await KeyRing.open(db), lease_seconds=lease)


async def test_a_pause_is_sealed_and_resumed_once(login: WorkerLogin) -> None:
    db, first = await worker(login)
    db2, second = await worker(login)
    try:
        pause_id = await first.pause("run-1", "openai_agents", STATE, ["apr-1"])
        owner = await asyncpg.connect(login.owner_url)
        try:
            sealed = await owner.fetchval(
                "SELECT state_sealed FROM paused_runs WHERE pause_id = $1", pause_id
            )
        finally:
            await owner.close()
        assert b"tok-123" not in sealed and b"refund" not in sealed
        assert await second.open_pause("run-1") == pause_id
        claims = await asyncio.gather(
            first.claim(pause_id), second.claim(pause_id), return_exceptions=True
        )
        won = [c for c in claims if not isinstance(c, BaseException)]
        lost = [c for c in claims if isinstance(c, PauseTaken)]
        assert len(won) == 1 and len(lost) == 1, claims
        assert won[0].state == STATE and won[0].approval_ids == ("apr-1",)
        holder = first if claims[0] is won[0] else second
        await holder.finish(won[0])
        with pytest.raises(PauseTaken, match="was resumed already"):
            await second.claim(pause_id)
        assert await second.open_pause("run-1") is None
        with pytest.raises(UnknownPause):
            await first.claim("pause-nope")
    finally:
        await db.close()
        await db2.close()


async def test_a_lapsed_lease_is_taken_over_and_the_late_worker_cannot_finish(
    login: WorkerLogin,
) -> None:
    db, dead = await worker(login, lease=1.0)
    db2, alive = await worker(login)
    try:
        pause_id = await dead.pause("run-2", "pydantic_ai", STATE, [])
        held = await dead.claim(pause_id)
        with pytest.raises(PauseTaken, match="being resumed elsewhere"):
            await alive.claim(pause_id)
        for _ in range(100):  # the lease is the server's: until its clock passes it
            try:
                taken = await alive.claim(pause_id)
                break
            except PauseTaken:
                await asyncio.sleep(0.05)
        else:
            raise AssertionError("the lapsed lease was never taken over")
        with pytest.raises(PauseTaken):
            await dead.finish(held)
        await alive.finish(taken)
    finally:
        await db.close()
        await db2.close()


async def test_a_worker_login_writes_paused_runs_only_through_the_functions(
    login: WorkerLogin,
) -> None:
    conn = await asyncpg.connect(login.url)
    try:
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute("UPDATE paused_runs SET status = 'paused'")
    finally:
        await conn.close()


async def test_release_pause_again_and_a_lease_held_while_resuming(login: WorkerLogin) -> None:
    db, first = await worker(login, lease=1.0)
    db2, second = await worker(login)
    try:
        pause_id = await first.pause("run-3", "openai_agents", STATE, ["apr-1"])
        held = await first.claim(pause_id)
        await first.release(held)  # nothing applied: the next resume need not wait
        taken = await second.claim(pause_id)
        again = await second.pause_again(taken, STATE + " and on", ["apr-2"])
        assert await second.open_pause("run-3") == again
        with pytest.raises(PauseTaken, match="was resumed already"):
            await first.claim(pause_id)
        with pytest.raises(PauseTaken):  # no longer held: nothing written
            await second.pause_again(taken, STATE, [])
        resumed = await first.claim(again)
        assert resumed.state == STATE + " and on" and resumed.approval_ids == ("apr-2",)
        async with first.holding(resumed):  # a 1 s lease, renewed for longer than that
            for _ in range(3):
                await asyncio.sleep(0.6)
                with pytest.raises(PauseTaken, match="being resumed elsewhere"):
                    await second.claim(again)
        await first.finish(resumed)
    finally:
        await db.close()
        await db2.close()
