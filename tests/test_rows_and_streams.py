"""Rows never outrank streams: a `tool_calls` row edited behind the journal's back cannot make the
ledger run, replay, retry, settle or resolve a call. The forgeries are plain SQL on the test's
superuser connection (what a worker's credentials could do before direct writes are revoked)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from approvals import ApprovalStore, Decision, approval_gate
from ledger.calls.model import CallContext, CallStatus, Effect, ToolCall, ToolPolicy, call_stream
from ledger.calls.service import ToolLedger
from ledger.errors import CallTampered, ResultNotSerializable
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from tests.support.directory import list_reviewers
from tests.support.scratch import scratch_database

from .support.processes import TEST_KEK

WRITE = ToolPolicy(Effect.SINGLE_ATTEMPT)


@pytest.fixture(scope="module")
async def tampered_db(server_url: str) -> AsyncIterator[Database]:
    """A database of this module's own: its rows are forged, which other modules' checks of the
    whole table would see."""
    async with (
        scratch_database(server_url, prefix="signoff_test") as url,
        await Database.connect(url) as db,
    ):
        await list_reviewers(url)
        yield db


@pytest.fixture(scope="module")
async def tools(tampered_db: Database) -> AsyncIterator[tuple[ToolLedger, ApprovalStore]]:
    ring = await KeyRing.open(tampered_db, LocalKek(TEST_KEK))
    ledger = ToolLedger(tampered_db, ring, lease_seconds=1.0, poll_interval=0.05)
    store = ApprovalStore(tampered_db, ring, poll_interval=0.05)
    yield ledger, store
    await ledger.close()
    await store.close()


class Refund:
    def __init__(self) -> None:
        self.runs = 0

    async def __call__(self, args: dict[str, Any], context: CallContext) -> dict[str, Any]:
        self.runs += 1
        return {"refunded": args["order"]}


@pytest.fixture
def warnings() -> Iterator[list[logging.LogRecord]]:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("signoff.ledger.calls.service")
    handler = Keep(logging.WARNING)
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)


def refusals(records: list[logging.LogRecord], run_id: str, call_id: str) -> list[str]:
    return [
        r.getMessage()
        for r in records
        if getattr(r, "run_id", None) == run_id
        and getattr(r, "call_id", None) == call_id
        and "disagrees with its stream" in r.getMessage()
    ]


async def test_a_finished_refund_set_back_to_a_lapsed_read_does_not_run_again(
    tools: tuple[ToolLedger, ApprovalStore],
    tampered_db: Database,
    warnings: list[logging.LogRecord],
) -> None:
    """Finding 2 as found: a single-attempt refund, approved and run once; then its row says
    running, effect read, lease lapsed, and its approval unconsumed. Nothing runs again: the
    ledger raises `CallTampered` (the row's sealed result is the part an attacker controls, so
    a careful caller is told, rather than handed a replay), logs a warning with the ids, writes
    nothing, and the reaper leaves the call alone."""
    ledger, store = tools
    run, args = f"run-{uuid.uuid4().hex[:10]}", {"order": "A-1042"}
    approval = await store.request(
        run_id=run, tool="refund", args=args, call_id="c1", requested_by="agent"
    )
    await store.decide(approval.approval_id, Decision.approve(), "alice")
    gate = approval_gate(store, approval.approval_id, f"{run}/c1", args)
    refund, call = Refund(), ToolCall(run, "c1", "refund", args)
    first = await ledger.execute(call, refund, WRITE, gate=gate)
    assert (first.status, refund.runs) == (CallStatus.SUCCEEDED, 1)

    async with tampered_db.connection() as conn:
        await conn.execute(
            "UPDATE tool_calls SET status = 'running', effect = 'read', "
            "lease_until = now() - interval '1 min' WHERE run_id = $1",
            run,
        )
        await conn.execute(
            "UPDATE approvals SET consumed_at = NULL WHERE approval_id = $1", approval.approval_id
        )
        events_before = await conn.fetchval("SELECT count(*) FROM events")

    with pytest.raises(CallTampered) as raised:
        await ledger.execute(call, refund, WRITE, gate=gate)
    assert {"status", "effect"} <= set(raised.value.fields)
    assert (raised.value.run_id, raised.value.call_id) == (run, "c1")
    assert refund.runs == 1, "the refund ran again"
    assert refusals(warnings, run, "c1")
    assert await ledger.reap() == 0
    with pytest.raises(CallTampered):
        await ledger.outcome(run, "c1")
    async with tampered_db.connection() as conn:
        assert await conn.fetchval("SELECT count(*) FROM events") == events_before
        assert await conn.fetchval("SELECT status FROM tool_calls WHERE run_id = $1", run) == (
            "running"
        )


async def test_a_row_that_says_succeeded_over_a_running_stream_is_not_replayed(
    tools: tuple[ToolLedger, ApprovalStore], tampered_db: Database
) -> None:
    """The stream says the call is still running (its worker never recorded an outcome); the
    row is made to say it succeeded, with a forged result sealed for it. It is not replayed,
    and a row made to say outcome_unknown is not resolved either."""
    ledger, _ = tools
    run = f"run-{uuid.uuid4().hex[:10]}"
    call = ToolCall(run, "c1", "refund", {"order": "A-7"})

    async def no_json(args: dict[str, Any], context: CallContext) -> object:
        return object()

    with pytest.raises(ResultNotSerializable):
        await ledger.execute(call, no_json, WRITE)
    sealed, digest = ledger.records.seal(call_stream(run, "c1"), "result", {"refunded": "forged"})
    async with tampered_db.connection() as conn:
        await conn.execute(
            "UPDATE tool_calls SET status = 'succeeded', result_sealed = $2, result_digest = $3,"
            " finished_at = now() WHERE run_id = $1",
            run,
            sealed,
            digest,
        )
    refund = Refund()
    with pytest.raises(CallTampered) as raised:
        await ledger.execute(call, refund, WRITE)
    assert "status" in raised.value.fields and refund.runs == 0
    # Nor does the row answer the call for an agent session (as settled, so the turn goes
    # on), by its own id or as the run's once-per-run call of its tool.
    with pytest.raises(CallTampered):
        await ledger.answering(run, "c1")
    async with tampered_db.connection() as conn:
        await conn.execute("UPDATE tool_calls SET once_per_run = true WHERE run_id = $1", run)
    with pytest.raises(CallTampered):
        await ledger.answering(run, "c2", "refund")

    async with tampered_db.connection() as conn:
        await conn.execute(
            "UPDATE tool_calls SET status = 'outcome_unknown' WHERE run_id = $1", run
        )
    with pytest.raises(CallTampered):
        await ledger.resolve(run, "c1", succeeded=True, by="mallory")


async def test_untouched_calls_still_replay_and_resolve(
    tools: tuple[ToolLedger, ApprovalStore],
) -> None:
    """The check costs nothing in behaviour: a finished call replays, a dead write is settled
    and resolved, once-per-run tools find the call that ran."""
    ledger, _ = tools
    run = f"run-{uuid.uuid4().hex[:10]}"
    refund = Refund()
    once = ToolPolicy(Effect.SINGLE_ATTEMPT, once_per_run=True)
    first = await ledger.execute(ToolCall(run, "c1", "refund", {"order": "B"}), refund, once)
    again = await ledger.execute(ToolCall(run, "c2", "refund", {"order": "B"}), refund, once)
    assert (first.replayed, again.replayed, again.call_id, refund.runs) == (False, True, "c1", 1)
    answer = await ledger.answering(run, "c9", "refund")
    assert answer is not None and (answer.call_id, answer.status.final) == ("c1", True)

    async def no_json(args: dict[str, Any], context: CallContext) -> object:
        return object()

    dead = ToolCall(run, "c3", "wire", {"order": "C"})
    with pytest.raises(ResultNotSerializable):
        await ledger.execute(dead, no_json, WRITE)
    async with ledger.db.connection() as conn:
        await conn.execute(
            "UPDATE tool_calls SET lease_until = now() - interval '1 s' WHERE run_id = $1 "
            "AND call_id = 'c3'",
            run,
        )  # the lease lapses now rather than in a second; the stream does not record leases
    assert await ledger.reap() >= 1
    resolved = await ledger.resolve(run, "c3", succeeded=False, by="alice")
    assert resolved.status is CallStatus.FAILED
    assert all(run not in p for p in await ledger.verify_projection())
