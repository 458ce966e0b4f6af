"""Tool calls fenced against the other workers, tried as an attacker holding a worker login
(`signoff_app` only) would: an approval allows only the call it was asked for, and only the
worker holding a call's lease renews it or records the call's outcome; others may take the call
over or settle it only once the lease has lapsed by the database server's clock.

The attacker's own statements are raw asyncpg calls of the database's functions, on a login of
its own and without a KEK (it needs none to call them); it laundering an approval is a worker
with the worker KEK, which every worker has, running the ledger with a gate of its own.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from adapters.runtime import decide_once
from approvals import ApprovalPolicy, ApprovalStore, Decision
from approvals.checks import verify_all
from approvals.projection import stream_of
from ledger.calls import CallContext, CallStatus, Effect, GateRun, ToolCall, ToolLedger, ToolPolicy
from ledger.calls.model import call_stream
from ledger.errors import (
    ConfigurationError,
    LeaseLost,
    ResultTampered,
    RowOutOfStep,
    UnknownKey,
)
from ledger.journal import Journal
from ledger.keys import KeyRing, LocalKek, Purpose
from ledger.store import Database
from ledger.store.logins import temporary_login
from ledger.store.settings import Settings

from .support.processes import ROOT, TEST_KEK, TEST_REVIEWER_KEK
from .support.scratch import scratch_database
from .support.until import until

READ = ToolPolicy(Effect.READ)
WRITE = ToolPolicy(Effect.SINGLE_ATTEMPT)
MALLORY_TOKEN = b"a token mallory made up herself"
# The parameters of `signoff_commit_call` before it took a lease token.
OLD_COMMIT_CALL = (
    "boolean, text, text, text, text, boolean, text, text, text, text, text, integer, text, text,"
    " text, timestamptz, timestamptz, text[], text, bytea, bytea, double precision, text, integer,"
    " text[], json[], text[], text"
)


@dataclass
class Logins:
    owner: str
    victim: str
    attacker: str
    reviewer: str


@pytest.fixture(scope="module")
async def logins(server_url: str) -> AsyncIterator[Logins]:
    async with scratch_database(server_url, prefix="signoff_fences") as owner:
        async with await Database.connect(owner) as db:  # the owner makes the data keys
            await KeyRing.open(db, LocalKek(TEST_KEK), reviewer_kek=LocalKek(TEST_REVIEWER_KEK))
        async with (
            temporary_login(owner, "signoff_app") as victim,
            temporary_login(owner, "signoff_app") as attacker,
            temporary_login(owner, "signoff_reviewer") as reviewer,
        ):
            yield Logins(owner, victim, attacker, reviewer)


@dataclass
class Side:
    db: Database
    ring: KeyRing
    store: ApprovalStore

    async def close(self) -> None:
        await self.store.close()
        await self.db.close()


async def open_side(url: str, reviewer_kek: LocalKek | None = None) -> Side:
    settings = Settings(database_url=url, kek=LocalKek(TEST_KEK), reviewer_kek=reviewer_kek)
    db = await Database.connect(url, pool_size=4, settings=settings)
    ring = await KeyRing.open(db, create_missing=False)
    return Side(db, ring, ApprovalStore(db, ring, poll_interval=0.05))


@pytest.fixture(scope="module")
async def victim(logins: Logins) -> AsyncIterator[Side]:
    side = await open_side(logins.victim)
    yield side
    await side.close()


@pytest.fixture(scope="module")
async def reviewer(logins: Logins) -> AsyncIterator[Side]:
    side = await open_side(logins.reviewer, LocalKek(TEST_REVIEWER_KEK))
    yield side
    await side.close()


@pytest.fixture
async def mallory(logins: Logins) -> AsyncIterator[asyncpg.Connection]:
    """The attacker's own connection: another worker's login, no KEK."""
    conn = await asyncpg.connect(logins.attacker)
    try:
        yield conn
    finally:
        await conn.close()


def new_run() -> str:
    return f"fence-{uuid.uuid4().hex[:10]}"


# -- the attacker's statements -------------------------------------------------------------------


async def _takes_token(conn: asyncpg.Connection) -> bool:
    """Whether the database's functions take a lease token (the attacker calls what is there)."""
    found: bool | None = await conn.fetchval(
        "SELECT 'p_lease_token' = ANY(proargnames) FROM pg_proc"
        " WHERE proname = 'signoff_commit_call'"
    )
    return bool(found)


async def _takes_tally(conn: asyncpg.Connection) -> bool:
    found: bool | None = await conn.fetchval(
        "SELECT 'p_tally' = ANY(proargnames) FROM pg_proc WHERE proname = 'signoff_commit_call'"
    )
    return bool(found)


async def commit_call(conn: asyncpg.Connection, **named: Any) -> Any:
    if not await _takes_token(conn):
        named.pop("p_lease_token", None)
    if not await _takes_tally(conn):
        named.pop("p_tally", None)
    text = ", ".join(f"{name} => ${i}" for i, name in enumerate(named, 1))
    return await conn.fetchval(f"SELECT signoff_commit_call({text})", *named.values())


async def renew(conn: asyncpg.Connection, row: asyncpg.Record, token: bytes, seconds: float) -> int:
    held = ([row["run_id"]], [row["call_id"]], [row["version"]])
    if await _takes_token(conn):
        renewed: int = await conn.fetchval(
            "SELECT signoff_renew_leases($1, $2, $3, $4, $5)", *held, [token], seconds
        )
    else:
        renewed = await conn.fetchval("SELECT signoff_renew_leases($1, $2, $3, $4)", *held, seconds)
    return renewed


async def row_of(conn: asyncpg.Connection, call: ToolCall) -> asyncpg.Record:
    row = await conn.fetchrow(
        "SELECT *, lease_until - now() AS lease_left FROM tool_calls"
        " WHERE run_id = $1 AND call_id = $2",
        call.run_id,
        call.call_id,
    )
    assert row is not None
    return row


def step_on(row: asyncpg.Record, kind: str, status: str, **changes: Any) -> dict[str, Any]:
    """The next step of a call whose row the attacker read, as `signoff_commit_call` takes it."""
    at = datetime.now(UTC)
    data = {"attempt": row["attempts"], "result_digest": "mallory", "at": at.isoformat()}
    step = {
        "p_insert": False,
        "p_run_id": row["run_id"],
        "p_call_id": row["call_id"],
        "p_tool": row["tool"],
        "p_effect": row["effect"],
        "p_once_per_run": row["once_per_run"],
        "p_request_digest": row["request_digest"],
        "p_args_digest": row["args_digest"],
        "p_idempotency_key": row["idempotency_key"],
        "p_approval_id": row["approval_id"],
        "p_status": status,
        "p_attempts": row["attempts"],
        "p_worker_id": "mallory",
        "p_result_digest": None if status == "running" else "mallory",
        "p_resolved_by": None,
        "p_started_at": row["started_at"],
        "p_finished_at": None if status == "running" else at,
        "p_approved_by": row["approved_by"],
        "p_approval_stream": row["approval_stream"],
        "p_args_sealed": None,
        "p_result_sealed": None,
        "p_lease_seconds": 86400.0,
        "p_lease_token": MALLORY_TOKEN,
        "p_tally": None,
        "p_stream": row["stream_id"],
        "p_expected": row["version"],
        "p_types": [kind],
        "p_data": [json.dumps(data)],
        "p_actors": ["mallory"],
        "p_notify": None,
    }
    return step | changes


class Running:
    """A call the victim runs, held inside its tool until `release`."""

    def __init__(self, ledger: ToolLedger, call: ToolCall, policy: ToolPolicy) -> None:
        self.ledger, self.call = ledger, call
        self.started, self.release = asyncio.Event(), asyncio.Event()
        self.task = asyncio.create_task(ledger.execute(call, self.tool, policy))

    async def tool(self, args: dict[str, Any], context: CallContext) -> str:
        self.started.set()
        await self.release.wait()
        return "done by the victim"

    async def __aenter__(self) -> Running:
        started = asyncio.ensure_future(self.started.wait())
        await asyncio.wait([self.task, started], timeout=30, return_when=asyncio.FIRST_COMPLETED)
        started.cancel()
        if self.task.done():
            self.task.result()  # what ended the call before its tool ran
        assert self.started.is_set(), "the tool did not start within 30 s"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release.set()
        if not self.task.done() and exc[0] is not None:
            self.task.cancel()


# -- approvals bound to their calls ---------------------------------------------------------------


async def approved_lookup(victim: Side, reviewer: Side, run: str) -> str:
    """An approval asked for `lookup(q=1)`, call c1 of `run`, and approved by alice."""
    approval = await victim.store.request(
        run_id=run,
        tool="lookup",
        args={"q": 1},
        call_id="c1",
        requested_by="agent",
        policy=ApprovalPolicy(approvers=frozenset({"alice"})),
    )
    await decide_once(reviewer.store, approval.approval_id, Decision.approve(), "alice")
    return approval.approval_id


@pytest.mark.parametrize(
    ("tool", "args"),
    [("wire_transfer", {"to": "mallory", "amount": 1_000_000}), ("lookup", {"q": 2})],
    ids=["another-tool", "other-arguments"],
)
async def test_an_approval_cannot_be_laundered_onto_another_call(
    logins: Logins, victim: Side, reviewer: Side, tool: str, args: dict[str, Any]
) -> None:
    """An approval decided for `lookup(q=1)` used to be recorded on a `wire_transfer` call of
    the same run and call id: the database compared only the run and the call id."""
    run = new_run()
    approval_id = await approved_lookup(victim, reviewer, run)
    attacker = await open_side(logins.attacker)  # a worker: it holds the worker KEK
    ledger = ToolLedger(attacker.db, attacker.ring)
    ran: list[dict[str, Any]] = []

    async def gate(conn: asyncpg.Connection) -> GateRun:
        approval = await attacker.store.consume(approval_id, f"{run}/c1", connection=conn)
        return GateRun(args, approval_id, stream_of(approval_id), approval.approved_by)

    async def wire(a: dict[str, Any], context: CallContext) -> str:
        ran.append(a)
        return "sent"

    try:
        with pytest.raises(RowOutOfStep, match="asked for another call"):
            await ledger.execute(ToolCall(run, "c1", tool, args), wire, gate=gate)
        assert ran == []
        async with attacker.db.connection() as conn:
            assert (
                await conn.fetchval("SELECT count(*) FROM tool_calls WHERE run_id = $1", run) == 0
            )
        # The approval was not used up: the call it was asked for still runs under it.
        assert (await victim.store.get(approval_id)).consumed_at is None
    finally:
        await ledger.close()
        await attacker.close()


async def test_verify_reports_a_call_recorded_under_another_calls_approval(
    logins: Logins, victim: Side, reviewer: Side
) -> None:
    """Such a pairing in the data (written by a database without the check) is a finding."""
    run = new_run()
    approval_id = await approved_lookup(victim, reviewer, run)
    baseline = ROOT / "migrations/versions/0001_baseline/ledger/calls/sql/commit_call.sql"
    owner = await asyncpg.connect(logins.owner)
    old = f"SELECT to_regprocedure('signoff_commit_call({OLD_COMMIT_CALL})') IS NOT NULL"
    had_it = await owner.fetchval(old)  # a database made before the check
    try:  # the function as it was before the check, beside today's, for this one call
        await owner.execute(baseline.read_text(encoding="utf-8"))
        # It writes events as that database did: tag 2, without their login.
        await owner.execute("ALTER TABLE events ALTER COLUMN tag_version SET DEFAULT 2")
        ledger = ToolLedger(victim.db, victim.ring)
        store = victim.store

        async def gate(conn: asyncpg.Connection) -> GateRun:
            approval = await store.consume(approval_id, f"{run}/c1", connection=conn)
            return GateRun({"to": "x"}, approval_id, stream_of(approval_id), approval.approved_by)

        async with victim.db.transaction() as conn:
            decision = await gate(conn)
            row = {
                "run_id": run,
                "call_id": "c1",
                "tool": "wire_transfer",
                "effect": "single_attempt",
                "once_per_run": False,
                "request_digest": "hmac:x:" + "0" * 64,
                "args_digest": "hmac:x:" + "0" * 64,
                "idempotency_key": f"{run}/0/c1",
                "approval_id": approval_id,
                "approval_stream": decision.approval_stream,
                "approved_by": list(decision.approved_by),
                "worker_id": "w",
                "at": datetime.now(UTC).isoformat(),
            }
            await conn.fetchval(
                "SELECT signoff_commit_call(true, $1, 'c1', 'wire_transfer', 'single_attempt',"
                " false, $2, $2, $3, $4, 'running', 1, 'w', NULL, NULL, now(), NULL, $5, $6,"
                " '\\x00'::bytea, NULL, 30::float8, $7, 0, ARRAY['call.started'],"
                " ARRAY[$8::json], ARRAY['w'], NULL)",
                run,
                row["request_digest"],
                row["idempotency_key"],
                approval_id,
                row["approved_by"],
                row["approval_stream"],
                call_stream(run, "c1"),
                json.dumps(row),
            )
        await ledger.close()
    finally:
        await owner.execute("ALTER TABLE events ALTER COLUMN tag_version SET DEFAULT 3")
        if not had_it:
            await owner.execute(f"DROP FUNCTION signoff_commit_call({OLD_COMMIT_CALL})")
        await owner.close()
    async with await Database.connect(
        logins.owner, settings=Settings(database_url=logins.owner, kek=LocalKek(TEST_KEK))
    ) as db:
        report = await verify_all(db)
    found = [p for p in report.problems if call_stream(run, "c1") in p]
    assert any("asked for another call" in p for p in found), report.problems


# -- leases ---------------------------------------------------------------------------------------


async def test_a_worker_cannot_renew_another_workers_lease(
    victim: Side, mallory: asyncpg.Connection
) -> None:
    """A worker used to renew any running call's lease, to a day."""
    ledger = ToolLedger(victim.db, victim.ring, lease_seconds=30.0)
    async with Running(ledger, ToolCall(new_run(), "c1", "refund", {}), WRITE) as running:
        row = await row_of(mallory, running.call)
        renewed = await renew(mallory, row, MALLORY_TOKEN, 86400)
        after = await row_of(mallory, running.call)
        assert renewed == 0
        assert after["lease_left"] <= timedelta(seconds=30)
    assert (await running.task).status is CallStatus.SUCCEEDED
    await ledger.close()


async def test_a_worker_cannot_record_another_workers_outcome_mid_run(
    victim: Side, mallory: asyncpg.Connection
) -> None:
    """A worker used to mark another's running call failed; the real worker then crashed with
    a TypeError reading the result that call had no longer."""
    ledger = ToolLedger(victim.db, victim.ring, lease_seconds=30.0)
    async with Running(ledger, ToolCall(new_run(), "c1", "refund", {}), WRITE) as running:
        row = await row_of(mallory, running.call)
        for token in (MALLORY_TOKEN, None):
            with pytest.raises(asyncpg.PostgresError) as refused:
                await commit_call(
                    mallory, **step_on(row, "call.failed", "failed", p_lease_token=token)
                )
            assert refused.value.sqlstate == "SG432"
        assert (await row_of(mallory, running.call))["status"] == "running"
    outcome = await running.task
    assert (outcome.status, outcome.result) == (CallStatus.SUCCEEDED, "done by the victim")
    events = await Journal(victim.db).read_stream(call_stream(row["run_id"], row["call_id"]))
    assert [e.type for e in events] == ["call.started", "call.succeeded"]
    await ledger.close()


async def test_a_worker_cannot_take_a_call_over_before_its_lease_lapses(
    victim: Side, mallory: asyncpg.Connection
) -> None:
    """A worker used to append `call.retried` to any running call, its lease running or not,
    making itself the call's worker: the real worker's outcome was then dropped."""
    ledger = ToolLedger(victim.db, victim.ring, lease_seconds=30.0)
    async with Running(ledger, ToolCall(new_run(), "c1", "lookup", {}), READ) as running:
        row = await row_of(mallory, running.call)
        retried = {"attempt": 2, "worker_id": "mallory", "at": datetime.now(UTC).isoformat()}
        with pytest.raises(asyncpg.PostgresError) as refused:
            await commit_call(
                mallory,
                **step_on(
                    row, "call.retried", "running", p_attempts=2, p_data=[json.dumps(retried)]
                ),
            )
        assert refused.value.sqlstate == "SG432"
    outcome = await running.task
    assert (outcome.status, outcome.attempts) == (CallStatus.SUCCEEDED, 1)
    await ledger.close()


async def test_no_lease_lasts_a_day(victim: Side, mallory: asyncpg.Connection) -> None:
    """Leases used to run up to 24 hours, by the ledger's setting or a worker's own call: a
    call whose worker died stayed stuck for a day."""
    with pytest.raises(ConfigurationError, match="1 to 300 seconds"):
        ToolLedger(victim.db, victim.ring, lease_seconds=86400)
    run = new_run()
    started = {"run_id": run, "call_id": "c1", "at": datetime.now(UTC).isoformat()}
    own = {
        "p_insert": True,
        "p_run_id": run,
        "p_call_id": "c1",
        "p_tool": "refund",
        "p_effect": "single_attempt",
        "p_once_per_run": False,
        "p_request_digest": "r",
        "p_args_digest": "a",
        "p_idempotency_key": "k",
        "p_approval_id": None,
        "p_status": "running",
        "p_attempts": 1,
        "p_worker_id": "mallory",
        "p_result_digest": None,
        "p_resolved_by": None,
        "p_started_at": datetime.now(UTC),
        "p_finished_at": None,
        "p_approved_by": [],
        "p_approval_stream": None,
        "p_args_sealed": b"sealed",
        "p_result_sealed": None,
        "p_lease_seconds": 86400.0,
        "p_lease_token": MALLORY_TOKEN,
        "p_tally": None,
        "p_stream": call_stream(run, "c1"),
        "p_expected": 0,
        "p_types": ["call.started"],
        "p_data": [json.dumps(started)],
        "p_actors": ["mallory"],
        "p_notify": None,
    }
    assert await commit_call(mallory, **own) is not None  # its own call, its own token
    call = ToolCall(run, "c1", "refund", {})
    row = await row_of(mallory, call)
    assert row["lease_left"] <= timedelta(seconds=300)
    assert await renew(mallory, row, MALLORY_TOKEN, 86400) == 1
    assert (await row_of(mallory, call))["lease_left"] <= timedelta(seconds=300)


async def test_a_worker_whose_lease_was_taken_gets_lease_lost(logins: Logins, victim: Side) -> None:
    """The real worker, its lease lapsed while it stalled and the call taken over, is told so
    with a typed error; the takeover, after the lapse by the server's clock, is allowed."""
    ledger = ToolLedger(victim.db, victim.ring, lease_seconds=1.0, poll_interval=0.05)
    other_side = await open_side(logins.attacker)
    other = ToolLedger(other_side.db, other_side.ring, lease_seconds=30.0)
    call = ToolCall(new_run(), "c1", "lookup", {})
    try:
        async with Running(ledger, call, READ) as running:
            renewer = ledger._leases._renewer
            assert renewer is not None
            renewer.cancel()  # the worker stalls: nothing renews its lease

            async def lapsed() -> bool:
                async with victim.db.connection() as conn:
                    return bool(
                        await conn.fetchval(
                            "SELECT lease_until < now() FROM tool_calls WHERE run_id = $1",
                            call.run_id,
                        )
                    )

            await until(lapsed, what="the lease lapsed by the server's clock")

            async def again(args: dict[str, Any], context: CallContext) -> str:
                return "done by the other worker"

            taken = await other.execute(call, again, READ)
            assert (taken.status, taken.attempts) == (CallStatus.SUCCEEDED, 2)
            running.release.set()
            with pytest.raises(LeaseLost) as lost:
                await running.task
        assert lost.value.status == "succeeded"
        assert (await other.outcome(call.run_id, call.call_id)).result == "done by the other worker"
    finally:
        await ledger.close()
        await other.close()
        await other_side.close()


# -- a finished row without its result ------------------------------------------------------------


async def test_a_finished_call_without_its_result_is_result_tampered(
    logins: Logins, victim: Side
) -> None:
    """A finished row whose result ciphertext was removed used to crash its reader with a
    TypeError (`key_id_of(None)`); it is a tampered result."""
    ledger = ToolLedger(victim.db, victim.ring)
    call = ToolCall(new_run(), "c1", "refund", {})

    async def tool(args: dict[str, Any], context: CallContext) -> str:
        return "refunded"

    try:
        assert (await ledger.execute(call, tool, WRITE)).status is CallStatus.SUCCEEDED
        owner = await asyncpg.connect(logins.owner)  # only the owner can edit a row
        try:
            await owner.execute(
                "UPDATE tool_calls SET result_sealed = NULL WHERE run_id = $1", call.run_id
            )
        finally:
            await owner.close()
        with pytest.raises(ResultTampered, match="missing"):
            await ledger.outcome(call.run_id, call.call_id)
        with pytest.raises(ResultTampered):
            await ledger.execute(call, tool, WRITE)  # the replay reads it too
        with pytest.raises(UnknownKey, match="not a Signoff ciphertext"):
            await victim.ring.decrypt(Purpose.RESULT, None, b"", "a removed result")  # type: ignore[arg-type]
    finally:
        await ledger.close()
