"""`signoff ledger verify` checks everything an auditor relies on, in order: the hash chains, that
every event is in the global order, every projection against a rebuild, and the stream checks.
Forgeries are plain SQL on the test's superuser connection."""

from __future__ import annotations

import importlib
import json
import pkgutil
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

import approvals
import ledger
from approvals import ApprovalPolicy, ApprovalStore, Decision, approval_gate
from approvals.checks import PROJECTIONS, verify_all
from ledger.audit.integrity import StreamCheck, StreamChecker, check_global_order, verify_ledger
from ledger.calls.model import CallContext, Effect, ToolCall, ToolPolicy
from ledger.calls.service import ToolLedger
from ledger.canonical import chain_hash, event_bytes, jcs_json
from ledger.errors import AppendInSavepoint
from ledger.journal import Event, Journal, NewEvent, Projection
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.logins import temporary_login

from .support.processes import TEST_KEK, kek_env, run_cli

FUTURE_TXID = 9_000_000_000_000  # far beyond any transaction id this server will hand out


async def double(args: dict[str, Any], context: CallContext) -> dict[str, Any]:
    return {"doubled": args["n"] * 2}


async def fill(db: Database) -> str:
    """An approved call (its approval consumed in the intent's transaction), a plain call and a
    stream of notes; returns the notes' stream."""
    ring = await KeyRing.open(db, LocalKek(TEST_KEK))
    store = ApprovalStore(db, ring)
    calls = ToolLedger(db, ring)
    run, args = f"run-{uuid.uuid4().hex[:8]}", {"n": 2}
    try:
        approval = await store.request(
            run_id=run, tool="refund", args=args, call_id="c1", requested_by="agent",
            policy=ApprovalPolicy(approvers=frozenset({"alice"})),
        )  # fmt: skip
        await store.decide(approval.approval_id, Decision.approve(), "alice")
        gate = approval_gate(store, approval.approval_id, f"{run}/c1", args)
        policy = ToolPolicy(Effect.SINGLE_ATTEMPT)
        await calls.execute(ToolCall(run, "c1", "refund", args), double, policy, gate=gate)
        await calls.execute(ToolCall(run, "c2", "lookup", args), double, ToolPolicy(Effect.READ))
    finally:
        await store.close()
        await calls.close()
    notes = f"note:{uuid.uuid4().hex[:8]}"
    await Journal(db).append(notes, [NewEvent("noted", {"n": 1}, "auditor")], expected_version=0)
    return notes


@pytest.fixture
async def filled(fresh_database_url: str) -> AsyncIterator[tuple[str, Database, str]]:
    async with await Database.connect(fresh_database_url) as db:
        yield fresh_database_url, db, await fill(db)


async def forge_event(db: Database, stream: str, txid: int) -> int:
    """Append a correctly chained event to `stream` by a direct INSERT with a chosen `txid`;
    return its position."""
    head = (await Journal(db).read_stream(stream))[-1]
    version, data, at = head.version + 1, jcs_json({"n": 2}), datetime.now(UTC)
    async with db.connection() as conn:
        login = await conn.fetchval("SELECT session_user")
        canonical = event_bytes(
            stream, version, "noted", "auditor", at, data, tag_version=3, login=login
        )
        digest = chain_hash(head.hash, canonical)
        position: int = await conn.fetchval(
            "INSERT INTO events (txid, stream_id, version, type, data, actor, recorded_at, hash,"
            " login) VALUES ($1::text::xid8, $2, $3, 'noted', $4::json, 'auditor', $5, $6,"
            " session_user) RETURNING position",
            str(txid),
            stream,
            version,
            data,
            at,
            digest,
        )
    return position


async def test_a_clean_ledger_verifies_and_says_what_was_checked(
    filled: tuple[str, Database, str],
) -> None:
    url, db, _ = filled
    report = await verify_all(db)
    assert report.ok, report.problems
    assert report.order.events == report.chains.events > 0
    assert {p.table: p.rows for p in report.projections} == {
        "approvals": 1,
        "tool_calls": 2,
        "reviewers": 0,
        "policy_sets": 0,
    }

    result = await run_cli("ledger", "verify", database_url=url, env=kek_env())
    assert result.code == 0, result.stdout + result.stderr
    assert result.stdout.startswith("ledger intact:")
    assert "approvals (1 rows), tool_calls (2 rows)" in result.stdout
    assert "global order" in result.stdout
    assert "decision signatures and policies (1 streams)" in result.stdout
    without_kek = await run_cli("ledger", "verify", database_url=url)
    assert without_kek.code == 0 and "skipped (no KEK configured" in without_kek.stdout
    as_json = json.loads((await run_cli("ledger", "verify", "--json", database_url=url)).stdout)
    assert as_json["ok"] is True and as_json["problems"] == []
    assert as_json["order"]["events"] == as_json["events"]


async def test_a_login_with_only_the_worker_role_can_verify(
    filled: tuple[str, Database, str],
) -> None:
    """`ledger verify` reads the events (with their `xmin`) and the projection tables, which
    the worker role may read; the auditor role sees only the audit views and cannot."""
    url, _, _ = filled
    async with (
        temporary_login(url, "signoff_app") as app,
        temporary_login(url, "signoff_auditor") as auditor,
    ):
        result = await run_cli("ledger", "verify", database_url=app)
        assert result.code == 0, result.stdout + result.stderr
        result = await run_cli("ledger", "verify", database_url=auditor)
        assert result.code == 2 and "use a login granted signoff_app" in result.stderr, result


async def test_an_event_with_a_txid_in_the_future_is_reported(
    filled: tuple[str, Database, str],
) -> None:
    """Finding 3 as found: a direct INSERT with a txid far in the future and a correctly
    chained hash. `read_stream` returns the event, `read_all` never does, the hash chains are
    intact; the global-order check names it, and `ledger verify` exits 1 naming it."""
    url, db, notes = filled
    journal = Journal(db)
    position = await forge_event(db, notes, FUTURE_TXID)
    assert [e.position for e in await journal.read_stream(notes)][-1] == position
    assert position not in [e.position async for e in journal.read_all()]
    assert (await journal.verify()).ok, "the chain is correctly forged"

    order = await check_global_order(db)
    assert [(b.position, b.stream_id, b.version) for b in order.bad] == [(position, notes, 2)]
    assert "in the future" in order.bad[0].problem
    report = await verify_all(db)
    assert not report.ok and report.problems[0].startswith("global order")

    result = await run_cli("ledger", "verify", database_url=url)
    assert result.code == 1, result.stdout + result.stderr
    first = result.stdout.splitlines()[0]
    assert first.startswith("ledger TAMPERED: 1 problem(s); first: global order")
    assert notes in first and f"position {position}" in first
    bad = json.loads((await run_cli("ledger", "verify", "--json", database_url=url)).stdout)
    assert [b["position"] for b in bad["order"]["bad"]] == [position]


async def test_an_event_with_another_transactions_txid_is_reported(
    filled: tuple[str, Database, str],
) -> None:
    """A txid in the past (an earlier transaction's) puts the event behind readers' cursors."""
    _, db, notes = filled
    earlier = (await Journal(db).read_stream(notes))[0].txid
    position = await forge_event(db, notes, earlier)
    order = await check_global_order(db)
    assert [(b.position, b.stream_id) for b in order.bad] == [(position, notes)]
    assert "not the transaction that inserted it" in order.bad[0].problem


async def test_a_projection_row_edited_by_the_owner_is_reported(
    filled: tuple[str, Database, str],
) -> None:
    url, db, _ = filled
    async with db.connection() as conn:
        run = await conn.fetchval("SELECT run_id FROM tool_calls WHERE call_id = 'c1'")
        await conn.execute("UPDATE tool_calls SET attempts = 7 WHERE call_id = 'c1'")
    result = await run_cli("ledger", "verify", database_url=url)
    assert result.code == 1, result.stdout + result.stderr
    first = result.stdout.splitlines()[0]
    assert "first: projection tool_calls" in first and f"call:{run}/c1" in first
    # The chains and the global order are intact: only the projection is named.
    report = await verify_all(db)
    assert report.chains.ok and report.order.ok and len(report.problems) == 1


async def test_stream_checks_run_over_whole_streams_after_the_projections(
    filled: tuple[str, Database, str],
) -> None:
    """The hook decision signatures and policies plug into: a `StreamCheck` sees every stream
    under its prefix, whole, and its problems are reported last."""
    _, db, _ = filled
    seen: dict[str, list[str]] = {}

    async def prepare(database: Database) -> StreamChecker:
        async def check(stream_id: str, events: Sequence[Event]) -> list[str]:
            seen[stream_id] = [e.type for e in events]
            return ["unsigned decision"] if "approval.decided" in seen[stream_id] else []

        return check

    hook = StreamCheck("decision signatures", "approval:", prepare)
    report = await verify_ledger(db, PROJECTIONS, [hook])
    assert len(seen) == 1
    [(stream, types)] = seen.items()
    assert types[0] == "approval.requested" and "approval.consumed" in types
    assert report.problems == [f"decision signatures: {stream}: unsigned decision"]
    assert [(c.name, c.streams) for c in report.stream_checks] == [("decision signatures", 1)]


def test_every_projection_is_verified() -> None:
    """`approvals.checks.PROJECTIONS` lists every projection instance the packages define, so
    a new one (a reviewer directory, say) cannot be left out of `ledger verify`."""
    found: set[int] = set()
    for package in (ledger, approvals):
        for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            names = vars(importlib.import_module(module.name))
            found |= {id(v) for v in names.values() if isinstance(v, Projection)}
    assert found == {id(p) for p in PROJECTIONS}


async def test_events_are_never_appended_in_a_savepoint_so_verify_stays_intact(
    db: Database, store: ApprovalStore
) -> None:
    """An event inserted in a savepoint would carry the savepoint's id as `xmin`, which verify
    cannot tell from a forged `txid`. Both the plain append and the write functions behind
    projected streams refuse it, typed when the connection block ends; the same append at a
    transaction's top level is written."""
    journal, stream = Journal(db), f"savepoint-{uuid.uuid4().hex[:8]}"
    event = NewEvent("thing.happened", {"n": 1}, actor="test")
    run_id = f"sp-{uuid.uuid4().hex[:8]}"
    with pytest.raises(AppendInSavepoint) as refused:
        async with db.transaction() as conn, conn.transaction():  # asyncpg: a savepoint
            await journal.append(stream, [event], expected_version=0, connection=conn)
    assert refused.value.stream_id == stream
    with pytest.raises(AppendInSavepoint):
        async with db.transaction() as conn, conn.transaction():
            await store.request(
                run_id=run_id,
                tool="refund",
                args={"amount": 1},
                call_id="c1",
                requested_by="agent",
                connection=conn,
            )
    async with db.transaction() as conn:
        await journal.append(stream, [event], expected_version=0, connection=conn)
    assert [e.version for e in await journal.read_stream(stream)] == [1]
    assert await store.find(run_id=run_id) == []
    assert (await check_global_order(db)).ok
