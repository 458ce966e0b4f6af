"""Evidence needs its signature: what names a person (a decision, a cancellation, a resolution,
a reveal) is signed by the reviewer side or refused, by the database and by `ledger verify`.

Each attacker below holds a login of one role and no KEK, and writes with raw asyncpg what the
library would write (`ledger.journal.projection.commit` builds the write functions' calls); the
database refuses it. What the owner could still put in behind the functions (simulated as the
tamper tests do, writing as the owner) `signoff ledger verify --json` reports, exit 1.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from approvals import ApprovalPolicy, ApprovalStatus, ApprovalStore, Decision
from approvals.model import Approval, binding_of
from approvals.projection import APPROVALS, stream_of
from ledger.audit.reveals import record_reveal
from ledger.calls.model import CallContext, CallRecord, CallStatus, Effect, ToolCall, ToolPolicy
from ledger.calls.projection import CALLS
from ledger.calls.service import ToolLedger
from ledger.errors import ReviewerKekMissing
from ledger.journal import NewEvent
from ledger.journal.projection import commit
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.logins import temporary_login
from ledger.store.settings import Settings

from .support.directory import list_reviewers
from .support.processes import TEST_KEK, TEST_REVIEWER_KEK, kek_env, run_cli
from .support.scratch import scratch_database

WRITE = ToolPolicy(Effect.SINGLE_ATTEMPT)
GARBAGE = {"key_id": "decision-signing-0", "signature": "AAAA"}
REFUSED = ("SG401",)  # EventNotPermitted: not this login's to append


@dataclass
class Setting:
    owner: str
    worker: str  # a login with only signoff_app
    reviewer: str  # a login with only signoff_reviewer
    store: ApprovalStore  # a genuine worker (signoff_app and the worker KEK)
    ledger: ToolLedger
    decider: ApprovalStore  # the genuine reviewer side (both KEKs)


async def _side(url: str, reviewer_kek: LocalKek | None) -> tuple[Database, KeyRing]:
    settings = Settings(database_url=url, kek=LocalKek(TEST_KEK), reviewer_kek=reviewer_kek)
    db = await Database.connect(url, pool_size=2, settings=settings)
    return db, await KeyRing.open(db, create_missing=False)


@pytest.fixture(scope="module")
async def setting(server_url: str) -> AsyncIterator[Setting]:
    reviewer_kek = LocalKek(TEST_REVIEWER_KEK)
    async with scratch_database(server_url, prefix="signoff_forged") as owner:
        async with await Database.connect(owner) as db:  # the owner makes the data keys
            await KeyRing.open(db, LocalKek(TEST_KEK), reviewer_kek=reviewer_kek)
        await list_reviewers(owner)
        async with (
            temporary_login(owner, "signoff_app") as worker,
            temporary_login(owner, "signoff_reviewer") as reviewer,
        ):
            worker_db, worker_ring = await _side(worker, None)
            reviewer_db, reviewer_ring = await _side(reviewer, reviewer_kek)
            store, decider = (
                ApprovalStore(worker_db, worker_ring),
                ApprovalStore(reviewer_db, reviewer_ring),
            )
            ledger = ToolLedger(worker_db, worker_ring)
            try:
                yield Setting(owner, worker, reviewer, store, ledger, decider)
            finally:
                await ledger.close()
                await store.close()
                await decider.close()
                await worker_db.close()
                await reviewer_db.close()


async def _raw(url: str) -> asyncpg.Connection:
    """The attacker's connection: raw asyncpg, no Signoff in between."""
    conn: asyncpg.Connection = await asyncpg.connect(url)
    return conn


def _run() -> str:
    return f"forged-{uuid.uuid4().hex[:10]}"


async def _ask(store: ApprovalStore, policy: ApprovalPolicy | None = None) -> Approval:
    return await store.request(
        run_id=_run(),
        tool="wire_transfer",
        args={"amount": 1_000_000},
        call_id="c1",
        requested_by="agent",
        policy=policy or ApprovalPolicy(approvers=frozenset({"cfo"})),
    )


def _requested(approval_id: str, run_id: str) -> NewEvent:
    """An `approval.requested` as a worker without the KEK can make it: no MAC."""
    now = datetime.now(UTC).isoformat()
    digest = "0" * 64
    data = {
        "run_id": run_id,
        "thread_id": None,
        "tool": "wire_transfer",
        "kind": "tool_call",
        "call_id": "c1",
        "args_digest": digest,
        "binding": binding_of(run_id, "wire_transfer", "tool_call", digest, "c1", approval_id),
        "policy": ApprovalPolicy(approvers=frozenset({"cfo"})).to_json(),
        "thread_config": None,
        "requested_at": now,
        "expires_at": None,
    }
    return NewEvent("approval.requested", data, actor="agent")


def _approved_by(who: str, **extra: Any) -> NewEvent:
    data = {
        "reviewer": who,
        "decision": "approve",
        "at": datetime.now(UTC).isoformat(),
        "groups": [],
        "final": True,
        "decided_by": [who],
        **extra,
    }
    return NewEvent("approval.decided", data, actor=who)


def _consumed() -> NewEvent:
    data = {"task_run_id": "task-1", "at": datetime.now(UTC).isoformat()}
    return NewEvent("approval.consumed", data, actor="task-1")


async def _fabricate(conn: asyncpg.Connection, approved: NewEvent) -> tuple[str, str]:
    """An approval requested, approved and consumed, and a call that ran under it and says so:
    written in one transaction through the functions a worker may call."""
    run_id, approval_id = _run(), f"apr-{uuid.uuid4().hex}"
    stream = stream_of(approval_id)
    async with conn.transaction():
        await commit(
            conn, APPROVALS, stream, None, [_requested(approval_id, run_id), approved, _consumed()],
            expected_version=0,
        )  # fmt: skip
        now = datetime.now(UTC).isoformat()
        started = {
            "run_id": run_id,
            "call_id": "c1",
            "tool": "wire_transfer",
            "effect": "single_attempt",
            "once_per_run": False,
            "request_digest": "0" * 64,
            "args_digest": "0" * 64,
            "idempotency_key": f"{run_id}/c1",
            "approval_id": approval_id,
            "worker_id": "w",
            "approved_by": ["cfo"],
            "approval_stream": stream,
            "at": now,
        }
        succeeded = {"result_digest": "0" * 64, "at": now}
        await commit(
            conn, CALLS, f"call:{run_id}/c1", None,
            [NewEvent("call.started", started, "w"), NewEvent("call.succeeded", succeeded, "w")],
            expected_version=0, args_sealed=b"", lease_seconds=60.0,
        )  # fmt: skip
    return approval_id, run_id


async def _refused(write: Any) -> str:
    with pytest.raises(asyncpg.PostgresError) as refused:
        await write
    sqlstate: str = refused.value.sqlstate
    return sqlstate


async def _flip(conn: asyncpg.Connection, approval: Approval, approved: NewEvent) -> Any:
    return await commit(
        conn,
        APPROVALS,
        stream_of(approval.approval_id),
        approval,
        [approved],
        expected_version=approval.version,
    )


async def _verify(url: str) -> tuple[int, list[str]]:
    result = await run_cli("ledger", "verify", "--json", database_url=url, env=kek_env())
    assert result.code in (0, 1), result.stderr
    return result.code, json.loads(result.stdout)["problems"]


def _named(problems: list[str], *parts: str) -> bool:
    return any(all(part in p for part in parts) for p in problems)


# -- a worker login without any KEK ----------------------------------------------------------


async def test_a_worker_cannot_fabricate_an_approval_nor_a_call_that_ran_under_it(
    setting: Setting,
) -> None:
    conn = await _raw(setting.worker)
    try:
        for approved in (
            _approved_by("cfo"),  # a reviewer's decision, unsigned
            _approved_by("cfo", grant_id="grant-x", grant={"grant_id": "grant-x"}),  # no grant
            _approved_by("cfo", signature=GARBAGE),  # a signature it cannot check
        ):
            assert await _refused(_fabricate(conn, approved)) in REFUSED
        assert await conn.fetchval("SELECT count(*) FROM tool_calls") == 0
    finally:
        await conn.close()


async def test_a_worker_cannot_flip_a_pending_approval_to_approved(setting: Setting) -> None:
    approval = await _ask(setting.store)
    conn = await _raw(setting.worker)
    try:
        for approved in (
            _approved_by("cfo"),
            _approved_by("cfo", signature=GARBAGE),
            _approved_by("cfo", grant_id="grant-x", grant={"grant_id": "grant-x"}),
        ):
            assert await _refused(_flip(conn, approval, approved)) in REFUSED
    finally:
        await conn.close()
    assert (await setting.store.get(approval.approval_id)).status is ApprovalStatus.PENDING


async def test_a_worker_cannot_claim_a_real_grant_for_another_run_nor_rename_its_granter(
    setting: Setting,
) -> None:
    """A sticky grant of alice's for one run is in force; the worker carries it whole (its
    signed event) onto a request of another run, or names cfo as the one it approved."""
    granted_run = _run()
    until = datetime.now(UTC) + timedelta(hours=1)
    grant_id = await setting.decider.grant(
        run_id=granted_run, tool="wire_transfer", until=until, granted_by="alice"
    )
    conn = await _raw(setting.worker)
    try:
        grant = json.loads(
            await conn.fetchval(
                "SELECT data FROM events WHERE stream_id = $1 AND version = 1", f"grant:{grant_id}"
            )
        )
        for run_id, decided_by in ((_run(), ["alice"]), (granted_run, ["cfo"])):
            approval_id = f"apr-{uuid.uuid4().hex}"
            approved = _approved_by("alice", grant_id=grant_id, grant=grant)
            approved = NewEvent(approved.type, approved.data | {"decided_by": decided_by}, "alice")
            sqlstate = await _refused(
                commit(
                    conn,
                    APPROVALS,
                    stream_of(approval_id),
                    None,
                    [_requested(approval_id, run_id), approved],
                    expected_version=0,
                )
            )
            assert sqlstate in REFUSED
    finally:
        await conn.close()


async def test_what_the_owner_puts_in_behind_the_functions_verify_reports(
    setting: Setting,
) -> None:
    """The same forgeries written as the owner (who may append anything): verify exits 1 and
    names each of them."""
    conn = await _raw(setting.owner)
    try:
        fabricated, _ = await _fabricate(conn, _approved_by("cfo"))
        pending = await _ask(setting.store)
        await _flip(conn, pending, _approved_by("cfo", signature=GARBAGE))
    finally:
        await conn.close()
    code, problems = await _verify(setting.owner)
    assert code == 1
    assert _named(problems, fabricated, "cfo's decision is unsigned")
    assert _named(problems, fabricated, "approval.requested carries no MAC")
    assert _named(problems, pending.approval_id, "cfo's decision", "unknown key")


async def test_cancellations_expiries_and_reveals_the_owner_puts_in_verify_reports(
    setting: Setting,
) -> None:
    cancelled = await _ask(setting.store)
    expired = await _ask(setting.store, ApprovalPolicy(expires_in=timedelta(hours=1)))
    reveal = f"reveal:{cancelled.approval_id}"
    conn = await _raw(setting.owner)
    try:
        await _flip(conn, cancelled, _closing("approval.cancelled", "cfo"))
        await _flip(conn, expired, _closing("approval.expired", "cfo"))
        await _reveal(conn, reveal, "alice")
    finally:
        await conn.close()
    code, problems = await _verify(setting.owner)
    assert code == 1
    assert _named(problems, cancelled.approval_id, "cfo's cancellation is unsigned")
    assert _named(problems, expired.approval_id, "an expiry in the name of cfo")
    assert _named(problems, expired.approval_id, "expired before its expiry")
    assert _named(problems, reveal, "alice's reveal unsigned")


# -- a reviewer login without the reviewer KEK -----------------------------------------------


async def _outcome_unknown(setting: Setting) -> CallRecord:
    call = ToolCall(_run(), "c1", "wire_transfer", {"amount": 1})

    async def dies(args: dict[str, Any], context: CallContext) -> None:
        raise RuntimeError("the bank did not answer")

    await setting.ledger.execute(call, dies, WRITE)
    record = await setting.ledger.get(call.run_id, call.call_id)
    assert record.status is CallStatus.OUTCOME_UNKNOWN
    return record


def _resolved(by: str, **extra: Any) -> NewEvent:
    data = {
        "status": "succeeded",
        "by": by,
        "result_digest": "0" * 64,
        "at": datetime.now(UTC).isoformat(),
        **extra,
    }
    return NewEvent("call.resolved", data, actor=by)


async def _resolve(conn: asyncpg.Connection, record: CallRecord, resolved: NewEvent) -> Any:
    return await commit(
        conn, CALLS, record.stream_id, record, [resolved], expected_version=record.version
    )


async def _reveal(conn: asyncpg.Connection, stream: str, by: str, **extra: Any) -> Any:
    data = {"approval_id": stream.removeprefix("reveal:"), "at": datetime.now(UTC).isoformat()}
    return await conn.fetchval(
        "SELECT signoff_append($1, 0, ARRAY['ledger.revealed'], ARRAY[$2::json], ARRAY[$3], NULL)",
        stream,
        json.dumps(data | extra),
        by,
    )


async def test_a_reviewer_login_without_its_kek_cannot_record_unsigned_evidence(
    setting: Setting,
) -> None:
    approval = await _ask(setting.store, ApprovalPolicy())
    record = await _outcome_unknown(setting)
    conn = await _raw(setting.reviewer)
    try:
        assert await _refused(_flip(conn, approval, _approved_by("bob"))) in REFUSED
        assert await _refused(_resolve(conn, record, _resolved("bob"))) in REFUSED
        reveal = f"reveal:{approval.approval_id}"
        assert await _refused(_reveal(conn, reveal, "alice")) in REFUSED
    finally:
        await conn.close()
    assert (await setting.store.get(approval.approval_id)).status is ApprovalStatus.PENDING


async def test_a_resolution_leaves_a_call_succeeded_or_failed_only(setting: Setting) -> None:
    """A reviewer's login cannot resolve a call back to running (its lease of its own, its
    attempts reset): the database takes only `succeeded` or `failed`."""
    record = await _outcome_unknown(setting)
    conn = await _raw(setting.reviewer)
    try:
        for status in ("running", "outcome_unknown", "denied"):
            resolved = _resolved("bob", status=status, signature=GARBAGE)
            # 22023 for `running`: the database first asks a running call for a lease token.
            assert await _refused(_resolve(conn, record, resolved)) in ("SG422", "22023"), status
    finally:
        await conn.close()
    assert (await setting.ledger.get(record.run_id, record.call_id)).status is (
        CallStatus.OUTCOME_UNKNOWN
    )


async def test_a_reviewer_logins_garbage_signatures_pass_the_database_and_fail_verify(
    setting: Setting,
) -> None:
    """The database checks that a signature is there, `ledger verify` that it is valid."""
    approval = await _ask(setting.store, ApprovalPolicy())
    record = await _outcome_unknown(setting)
    reveal = f"reveal:{approval.approval_id}"
    conn = await _raw(setting.reviewer)
    try:
        await _flip(conn, approval, _approved_by("bob", signature=GARBAGE))
        await _resolve(conn, record, _resolved("bob", signature=GARBAGE))
        await _reveal(conn, reveal, "alice", signature=GARBAGE)
    finally:
        await conn.close()
    code, problems = await _verify(setting.owner)
    assert code == 1
    assert _named(problems, approval.approval_id, "bob's decision", "unknown key")
    assert _named(problems, record.stream_id, "the resolution", "unknown key")
    assert _named(problems, reveal, "alice's reveal", "unknown key")


# -- workers acting on others' approvals -----------------------------------------------------


def _closing(type_: str, actor: str) -> NewEvent:
    return NewEvent(type_, {"at": datetime.now(UTC).isoformat()}, actor=actor)


async def test_a_worker_cannot_expire_early_nor_cancel_in_a_persons_name_nor_when_decided(
    setting: Setting,
) -> None:
    lasting = await _ask(setting.store, ApprovalPolicy(expires_in=timedelta(hours=1)))
    never = await _ask(setting.store, ApprovalPolicy())
    decided = await _ask(setting.store, ApprovalPolicy())
    await setting.decider.decide(decided.approval_id, Decision.approve(), "alice")
    decided = await setting.store.get(decided.approval_id)
    conn = await _raw(setting.worker)
    try:
        for approval in (lasting, never):  # before its expiry; one that never expires
            for actor in ("signoff", "cfo"):
                expired = _closing("approval.expired", actor)
                assert await _refused(_flip(conn, approval, expired)) in REFUSED
        for name in ("cfo", "alice"):  # a person's cancellation: the reviewer side's, signed
            cancelled = _closing("approval.cancelled", name)
            assert await _refused(_flip(conn, lasting, cancelled)) in REFUSED
        cancelled = _closing("approval.cancelled", "agent")  # its requester's own, once decided
        assert await _refused(_flip(conn, decided, cancelled)) in ("SG401", "SG422")
    finally:
        await conn.close()
    for approval in (lasting, never):
        assert (await setting.store.get(approval.approval_id)).status is ApprovalStatus.PENDING
    assert (await setting.store.get(decided.approval_id)).status is ApprovalStatus.APPROVED


async def test_genuine_cancellations_and_reveals_are_signed_and_verify(setting: Setting) -> None:
    """The legitimate paths: a worker withdraws its own request, the reviewer side cancels
    and reveals, signed; the worker's ring cannot cancel in a reviewer's name."""
    withdrawn, cancelled = await _ask(setting.store), await _ask(setting.store)
    assert (await setting.store.cancel(withdrawn.approval_id, "agent")).decided_by == ("agent",)
    with pytest.raises(ReviewerKekMissing):
        await setting.store.cancel(cancelled.approval_id, "cfo")
    await setting.decider.cancel(cancelled.approval_id, "cfo")
    decider = setting.decider
    stream = f"reveal:{cancelled.approval_id}"
    assert await record_reveal(decider.db, decider.ring, stream, "cfo", approval_id="x")
    with pytest.raises(ReviewerKekMissing):
        await record_reveal(setting.store.db, setting.store.ring, stream, "cfo")
    _, problems = await _verify(setting.owner)
    for clean in (withdrawn.approval_id, cancelled.approval_id, stream):
        assert not _named(problems, clean), problems


# -- data the checks read, names that are only words -------------------------------------------

# A call started with data that is a JSON array, written through the tool-call function.
_ARRAY_STARTED = (
    "SELECT signoff_commit_call(true, $1, 'c1', 'lookup', 'read', false, 'd1', 'd1', 'k1', NULL,"
    " 'running', 1, 'w1', NULL, NULL, now(), NULL, '{}', NULL, '\\x00'::bytea, NULL, 30,"
    " '\\x00112233445566778899aabbccddeeff'::bytea, NULL, 'call:' || $1 || '/c1', 0,"
    " ARRAY['call.started'], ARRAY['[]'::json], ARRAY['w1'], NULL)"
)


async def test_event_data_that_is_no_json_object_is_refused_before_anything_is_written(
    setting: Setting,
) -> None:
    """A worker's `call.started` whose data was `[]` made `ledger verify` crash (exit 2)."""
    worker, reviewer = await _raw(setting.worker), await _raw(setting.reviewer)
    try:
        run_id = _run()
        assert await _refused(worker.fetchval(_ARRAY_STARTED, run_id)) == "22023"
        assert (
            await worker.fetchval("SELECT count(*) FROM tool_calls WHERE run_id = $1", run_id) == 0
        )
        reveal = reviewer.fetchval(
            "SELECT signoff_append($1, 0, ARRAY['ledger.revealed'], ARRAY['[1]'::json],"
            " ARRAY['bob'], NULL)",
            f"reveal:{run_id}/c1",
        )
        assert await _refused(reveal) == "22023"
    finally:
        await worker.close()
        await reviewer.close()


async def test_verify_reports_event_data_that_is_no_json_object_and_does_not_crash(
    server_url: str,
) -> None:
    """Such data put in behind the functions (as the owner) is a finding, exit 1."""
    async with scratch_database(server_url, prefix="signoff_forged_data") as owner:
        settings = Settings(database_url=owner, kek=LocalKek(TEST_KEK))
        async with await Database.connect(owner, settings=settings) as db:
            ring = await KeyRing.open(db)
            ledger = ToolLedger(db, ring)
            try:

                async def lookup(args: dict[str, Any], context: CallContext) -> str:
                    return "found"

                await ledger.execute(
                    ToolCall(_run(), "c1", "lookup", {"q": 1}), lookup, ToolPolicy(Effect.READ)
                )
            finally:
                await ledger.close()
        conn = await _raw(owner)
        try:
            await conn.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
            await conn.execute("UPDATE events SET data = '[]' WHERE type = 'call.started'")
            await conn.execute("ALTER TABLE events ENABLE TRIGGER events_append_only")
        finally:
            await conn.close()
        result = await run_cli("ledger", "verify", "--json", database_url=owner, env=kek_env())
        assert result.code == 1, result.stderr
        assert "unexpected" not in result.stderr
        problems = json.loads(result.stdout)["problems"]
        assert _named(problems, "not what Signoff writes"), problems


async def test_another_worker_login_cannot_withdraw_a_request_in_its_requesters_name(
    setting: Setting,
) -> None:
    """`requested_by` is the caller's word: a second worker login named it and cancelled the
    first one's pending approval. Unsigned, a cancellation comes from the login that asked."""
    pending = await _ask(setting.store)
    withdrawn = NewEvent("approval.cancelled", {"at": datetime.now(UTC).isoformat()}, "agent")
    async with temporary_login(setting.owner, "signoff_app") as mallory_url:
        mallory = await _raw(mallory_url)
        try:
            assert await _refused(_flip(mallory, pending, withdrawn)) in REFUSED
        finally:
            await mallory.close()
    worker = await _raw(setting.worker)  # the login that asked may
    try:
        assert await _flip(worker, pending, withdrawn)
    finally:
        await worker.close()


async def test_a_worker_cannot_consume_an_approval_before_the_decision_that_ends_it(
    setting: Setting,
) -> None:
    """Requested, consumed, then approved by a sticky grant, in one call: the consumption came
    before anything had decided the approval."""
    run_id = _run()
    until = datetime.now(UTC) + timedelta(hours=1)
    grant_id = await setting.decider.grant(
        run_id=run_id, tool="wire_transfer", until=until, granted_by="alice"
    )
    conn = await _raw(setting.worker)
    try:
        grant = json.loads(
            await conn.fetchval(
                "SELECT data FROM events WHERE stream_id = $1 AND version = 1", f"grant:{grant_id}"
            )
        )
        approval_id = f"apr-{uuid.uuid4().hex}"
        approved = _approved_by("alice", grant_id=grant_id, grant=grant)
        written = commit(
            conn,
            APPROVALS,
            stream_of(approval_id),
            None,
            [_requested(approval_id, run_id), _consumed(), approved],
            expected_version=0,
        )
        assert await _refused(written) in REFUSED
    finally:
        await conn.close()
