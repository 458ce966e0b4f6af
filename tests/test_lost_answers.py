"""A write whose answer is lost (the server committed it, then the connection or the server
was lost before the client heard back, as in a failover) is tried again by the library where
that is safe, and it never doubles: a call's claim that committed is found by the lease token
of the `execute` that wrote it, which then runs the tool once, rather than waiting out its own
lease and leaving a call that never ran as `outcome_unknown` for a person to settle.

The ledger runs as agent workers run it: on a login with only `signoff_app` and the worker KEK;
the database's owner made the keys and reads what was recorded."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from ledger.calls import CallContext, CallStatus, ToolCall, ToolLedger, ToolPolicy
from ledger.calls.model import call_stream
from ledger.journal import Journal
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.settings import Settings

from .support.cutting_proxy import CuttingProxy, cutting_proxy
from .support.processes import TEST_KEK
from .support.worker_login import WorkerLogin, worker_login

WRITE = ToolPolicy()  # a single-attempt write


@pytest.fixture(scope="module")
async def login(server_url: str) -> AsyncIterator[WorkerLogin]:
    async with worker_login(server_url, LocalKek(TEST_KEK), prefix="signoff_lost") as made:
        yield made


@pytest.fixture(scope="module")
async def owner(login: WorkerLogin) -> AsyncIterator[Database]:
    """The database's owner: what was recorded is read with it."""
    async with await Database.connect(login.owner_url, pool_size=2) as db:
        yield db


async def worker_db(proxy: CuttingProxy) -> Database:
    """The worker login through `proxy`, with the worker KEK only (no reviewer KEK)."""
    settings = Settings(database_url=proxy.url, kek=LocalKek(TEST_KEK))
    return await Database.connect(proxy.url, pool_size=2, settings=settings)


async def test_a_claim_whose_answer_was_lost_runs_the_call_once(
    login: WorkerLogin, owner: Database
) -> None:
    async with cutting_proxy(login.url) as proxy:
        db = await worker_db(proxy)
        ledger = ToolLedger(db, await KeyRing.open(db), lease_seconds=30)
        runs: list[int] = []

        async def refund(args: dict[str, Any], context: CallContext) -> dict[str, Any]:
            runs.append(context.attempt)
            return {"refunded": args["amount"]}

        call = ToolCall(f"lost-{uuid.uuid4().hex[:8]}", "c1", "refund", {"amount": 120})
        try:
            proxy.arm(b"signoff_commit_call")  # the call's first write: its claim
            outcome = await asyncio.wait_for(ledger.execute(call, refund, WRITE), 60)
            assert proxy.cut.is_set(), "the claim's answer was not lost"
            assert (outcome.status, outcome.result, runs) == (
                CallStatus.SUCCEEDED,
                {"refunded": 120},
                [1],
            )
            events = await Journal(owner).read_stream(call_stream(call.run_id, call.call_id))
            assert [e.type for e in events] == ["call.started", "call.succeeded"]
        finally:
            await ledger.close()
            await db.close()
