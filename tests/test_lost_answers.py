"""A write whose answer is lost (the server committed it, then the connection or the server
was lost before the client heard back, as in a failover) is tried again by the library where
that is safe, and it never doubles: a call's claim that committed is found by the lease token
of the `execute` that wrote it, which then runs the tool once, rather than waiting out its own
lease and leaving a call that never ran as `outcome_unknown` for a person to settle.

The ledger runs as agent workers run it: on a login with only `signoff_app` and the worker KEK;
the database's owner made the keys and reads what was recorded."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from approvals import ApprovalPolicy, ApprovalStore, Decision, approval_gate
from ledger.calls import CallContext, CallStatus, ToolCall, ToolLedger, ToolPolicy
from ledger.calls.model import call_stream
from ledger.journal import Journal
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.settings import Settings

from .support.cutting_proxy import CuttingProxy, cutting_proxy
from .support.processes import TEST_KEK, TEST_REVIEWER_KEK
from .support.until import until
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


class ClaimRetries(logging.Handler):
    """The `tries` of each claim retry the ledger logs: how many failures its backoff had
    counted when it logged it."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.tries: list[int] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() == "claiming the call failed; retrying":
            self.tries.append(record.__dict__["tries"])


@pytest.fixture
def claim_retries() -> Iterator[ClaimRetries]:
    logger = logging.getLogger("signoff.ledger.calls.service")
    handler = ClaimRetries()
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


async def test_a_claim_that_was_answered_gives_a_later_outage_a_fresh_backoff(
    login: WorkerLogin, owner: Database, claim_retries: ClaimRetries
) -> None:
    """One `execute` meets two lost connections with an answered claim between them: the second
    outage's retries start afresh (their pauses and their deadline, a lease from it), rather
    than going on from the first's as if the database had never answered in between."""
    call = ToolCall(f"lost-{uuid.uuid4().hex[:8]}", "c1", "refund", {"amount": 120})
    started, release = asyncio.Event(), asyncio.Event()
    runs: list[str] = []

    async def held(args: dict[str, Any], context: CallContext) -> dict[str, Any]:
        runs.append("holder")
        started.set()
        await release.wait()
        return {"refunded": args["amount"]}

    async def again(args: dict[str, Any], context: CallContext) -> dict[str, Any]:
        runs.append("waiter")
        return {"refunded": args["amount"]}

    settings = Settings(database_url=login.url, kek=LocalKek(TEST_KEK))
    async with (
        await Database.connect(login.url, pool_size=2, settings=settings) as holder_db,
        cutting_proxy(login.url) as proxy,
    ):
        holder = ToolLedger(holder_db, await KeyRing.open(holder_db), lease_seconds=30)
        db = await worker_db(proxy)
        ledger = ToolLedger(db, await KeyRing.open(db), lease_seconds=30, poll_interval=0.05)
        holding = asyncio.create_task(holder.execute(call, held, WRITE))
        tasks = [holding]
        try:
            await asyncio.wait_for(started.wait(), 60)  # another worker runs the call
            # Lost: the answer of this execute's claim (a second try then finds the call held
            # and waits for it), then that of the wait's first look at the call.
            proxy.arm(b"signoff_commit_call", b"FROM tool_calls WHERE run_id = $1 AND call_id")
            waiting = asyncio.create_task(ledger.execute(call, again, WRITE))
            tasks.append(waiting)
            await until(lambda: len(claim_retries.tries) == 2, 60, "two claim retries")
            assert proxy.cuts == 2
            release.set()
            outcome = await asyncio.wait_for(waiting, 60)
            assert (outcome.status, outcome.result, outcome.replayed) == (
                CallStatus.SUCCEEDED,
                {"refunded": 120},
                True,
            )
            assert (await holding).status is CallStatus.SUCCEEDED
            assert runs == ["holder"]
            assert claim_retries.tries == [1, 1], "the backoff went on across an answer"
        finally:
            release.set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await ledger.close()
            await holder.close()
            await db.close()


async def test_a_gated_claim_whose_commit_answer_was_lost_runs_once_and_consumes_once(
    login: WorkerLogin, owner: Database
) -> None:
    """A call an approval allows is claimed in one transaction with the approval's
    consumption (`approval_gate`). Its COMMIT's answer lost, the claim is tried again, finds
    its own intent and runs the tool once; the gate does not run again, and the approval stays
    consumed once, by this call."""
    reviewer_settings = Settings(
        database_url=login.owner_url,
        kek=LocalKek(TEST_KEK),
        reviewer_kek=LocalKek(TEST_REVIEWER_KEK),
    )
    async with (
        await Database.connect(login.owner_url, pool_size=2, settings=reviewer_settings) as rdb,
        cutting_proxy(login.url) as proxy,
    ):
        reviewer = ApprovalStore(rdb, await KeyRing.open(rdb))
        db = await worker_db(proxy)
        ring = await KeyRing.open(db)
        store, ledger = ApprovalStore(db, ring), ToolLedger(db, ring, lease_seconds=30)
        runs: list[int] = []

        async def refund(args: dict[str, Any], context: CallContext) -> dict[str, Any]:
            runs.append(context.attempt)
            return {"refunded": args["amount"]}

        call = ToolCall(f"lost-{uuid.uuid4().hex[:8]}", "c1", "refund", {"amount": 120})
        task_run = f"{call.run_id}/{call.call_id}"
        try:
            asked = await store.request(
                run_id=call.run_id,
                tool=call.tool,
                args=call.args,
                call_id=call.call_id,
                requested_by="agent",
                policy=ApprovalPolicy(approvers=frozenset({"rita"})),
            )
            await reviewer.decide(asked.approval_id, Decision.approve(), "rita")
            gate = approval_gate(store, asked.approval_id, task_run, call.args)
            proxy.arm(b"COMMIT;")  # the claim's transaction: its intent and the consumption
            outcome = await asyncio.wait_for(ledger.execute(call, refund, WRITE, gate=gate), 60)
            assert proxy.cuts == 1, "the claim's commit answer was not lost"
            assert (outcome.status, outcome.result, runs) == (
                CallStatus.SUCCEEDED,
                {"refunded": 120},
                [1],
            )
            journal = Journal(owner)
            events = await journal.read_stream(call_stream(call.run_id, call.call_id))
            assert [e.type for e in events] == ["call.started", "call.succeeded"]
            assert events[0].data["approval_id"] == asked.approval_id
            approval_events = await journal.read_stream(events[0].data["approval_stream"])
            assert [e.type for e in approval_events].count("approval.consumed") == 1
            assert (await reviewer.get(asked.approval_id)).consumed_by == task_run
        finally:
            await ledger.close()
            await store.close()
            await reviewer.close()
            await db.close()
