"""What auditors get: filtered call listings, a call's whole story, reveals recorded, and a
read-only role that sees the audit views and nothing else."""

from __future__ import annotations

import csv
import io
import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from approvals import ApprovalStore, Decision, approval_gate
from ledger.audit.queries import CallFilter, call_story, find_calls
from ledger.calls.model import CallContext, CallStatus, Effect, ToolCall, ToolPolicy
from ledger.calls.service import ToolLedger
from ledger.canonical import chain_hash, event_bytes
from ledger.errors import ConfigurationError, InvalidEvent, UnknownCall
from ledger.journal import Journal
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database

from .support.processes import TEST_KEK, kek_env, run_cli


@pytest.fixture(scope="module")
async def audit_url(server_url: str) -> AsyncIterator[str]:
    """A database of this module's own: the key ring is made under this module's KEK."""
    from tests.support.directory import list_reviewers
    from tests.support.scratch import scratch_database

    async with scratch_database(server_url, prefix="signoff_test") as url:
        await list_reviewers(url)
        yield url


@pytest.fixture(scope="module")
async def seeded(audit_url: str) -> AsyncIterator[dict[str, Any]]:
    """Three calls in one run: a read, an approved refund and a rejected one."""
    async with await Database.connect(audit_url) as db:
        ring = await KeyRing.open(db, LocalKek(TEST_KEK))
        ledger = ToolLedger(db, ring)
        store = ApprovalStore(db, ring)
        run = f"run-{uuid.uuid4().hex[:8]}"

        async def tool(args: dict[str, Any], context: CallContext) -> dict[str, Any]:
            return {"ok": True, "secret": "RESULT-SECRET"}

        await ledger.execute(
            ToolCall(run, "lookup-1", "lookup", {"q": "ARG-SECRET"}), tool, ToolPolicy(Effect.READ)
        )
        for call_id, decision in (
            ("refund-1", Decision.approve()),
            ("refund-2", Decision.reject("no")),
        ):
            args = {"amount": 10}
            approval = await store.request(
                run_id=run, tool="refund", args=args, call_id=call_id, requested_by="agent"
            )
            await store.decide(approval.approval_id, decision, "alice")
            gate = approval_gate(store, approval.approval_id, f"{run}/{call_id}", args)
            await ledger.execute(ToolCall(run, call_id, "refund", args), tool, gate=gate)
        await store.close()
        await ledger.close()
        yield {"run": run}


async def test_find_calls_filters(audit_url: str, seeded: dict[str, Any]) -> None:
    run = seeded["run"]
    async with await Database.connect(audit_url) as db:
        everything = await find_calls(db, CallFilter(run_id=run))
        assert [c.call_id for c, _ in everything] == ["lookup-1", "refund-1", "refund-2"]
        refunds = await find_calls(db, CallFilter(run_id=run, tool="refund"))
        assert [c.call_id for c, _ in refunds] == ["refund-1", "refund-2"]
        denied = await find_calls(db, CallFilter(status=CallStatus.DENIED, run_id=run))
        assert [c.call_id for c, _ in denied] == ["refund-2"]
        # alice approved refund-1 and rejected refund-2: only the first is "approved by" her.
        by_alice = await find_calls(db, CallFilter(approved_by="alice", run_id=run))
        assert [(c.call_id, by) for c, by in by_alice] == [("refund-1", ("alice",))]
        assert dict((c.call_id, by) for c, by in refunds)["refund-2"] == ()
        future = datetime.now(UTC) + timedelta(days=1)
        assert await find_calls(db, CallFilter(run_id=run, since=future)) == []
        assert len(await find_calls(db, CallFilter(run_id=run, until=future))) == 3


async def test_a_calls_story_and_a_recorded_reveal(audit_url: str, seeded: dict[str, Any]) -> None:
    run = seeded["run"]
    async with await Database.connect(audit_url) as db:
        story = await call_story(db, run, "refund-1")
        assert [e.type for e in story.events] == ["call.started", "call.succeeded"]
        assert [e.type for e in story.approval_events] == [
            "approval.requested",
            "approval.decided",
            "approval.consumed",
        ]
        assert story.args is None and story.result is None
        ring = await KeyRing.open(db, LocalKek(TEST_KEK))
        revealed = await call_story(db, run, "lookup-1", reveal_by="auditor-ann", ring=ring)
        assert revealed.args == {"q": "ARG-SECRET"}
        assert revealed.result == {"ok": True, "secret": "RESULT-SECRET"}
        reveals = await Journal(db).read_stream(f"reveal:{run}/lookup-1")
        assert [(e.type, e.actor) for e in reveals] == [("ledger.revealed", "auditor-ann")]
        with pytest.raises(UnknownCall):
            await call_story(db, run, "no-such-call")
        for nobody in (" ", "ann\x00", "\ud800"):
            with pytest.raises(InvalidEvent, match="who reveals"):
                await call_story(db, run, "lookup-1", reveal_by=nobody, ring=ring)
        with pytest.raises(ConfigurationError, match="key ring"):
            await call_story(db, run, "lookup-1", reveal_by="auditor-ann")
        assert len(await Journal(db).read_stream(f"reveal:{run}/lookup-1")) == 1


async def test_the_auditor_role_reads_the_audit_views_only(
    audit_url: str, seeded: dict[str, Any]
) -> None:
    conn = await asyncpg.connect(audit_url)
    try:
        async with conn.transaction():
            await conn.execute("SET LOCAL ROLE signoff_auditor")
            assert await conn.fetchval("SELECT count(*) FROM audit_tool_calls") == 3
            assert await conn.fetchval("SELECT count(*) FROM audit_approvals") == 2
            assert await conn.fetchval("SELECT count(*) FROM audit_events") > 0
            assert "RESULT-SECRET" not in json.dumps(
                [dict(r) for r in await conn.fetch("SELECT * FROM audit_tool_calls")], default=str
            )
        for forbidden in (
            "SELECT * FROM data_keys",
            "SELECT * FROM tool_calls",
            "SELECT * FROM events",
            "INSERT INTO events (stream_id, version, type, data, actor, recorded_at, hash) "
            "VALUES ('x', 1, 't', '{}', 'a', now(), '\\x00')",
            "UPDATE approvals SET status = 'approved'",
            "DELETE FROM audit_tool_calls",
        ):
            async with conn.transaction():
                await conn.execute("SET LOCAL ROLE signoff_auditor")
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    await conn.execute(forbidden)
    finally:
        await conn.close()


async def test_cli_lists_and_shows_calls(audit_url: str, seeded: dict[str, Any]) -> None:
    run = seeded["run"]
    listed = await run_cli("ledger", "calls", "--run", run, "--json", database_url=audit_url)
    assert listed.code == 0, listed.stderr
    rows = json.loads(listed.stdout)["calls"]
    assert [r["call_id"] for r in rows] == ["lookup-1", "refund-1", "refund-2"]
    as_csv = await run_cli(
        "ledger", "calls", "--run", run, "--approved-by", "alice", "--csv", database_url=audit_url
    )
    assert [r["call_id"] for r in csv.DictReader(io.StringIO(as_csv.stdout))] == ["refund-1"]
    bad_date = await run_cli("ledger", "calls", "--since", "yesterday", database_url=audit_url)
    assert bad_date.code == 2 and "not an ISO 8601 time" in bad_date.stderr
    shown = await run_cli("ledger", "show", run, "refund-1", "--json", database_url=audit_url)
    assert shown.code == 0, shown.stderr
    assert "args" not in json.loads(shown.stdout)
    revealed = await run_cli(
        "ledger",
        "show",
        run,
        "lookup-1",
        "--reveal",
        "--by",
        "auditor-bo",
        "--json",
        database_url=audit_url,
        env=kek_env(),
    )
    assert revealed.code == 0, revealed.stderr
    assert json.loads(revealed.stdout)["args"] == {"q": "ARG-SECRET"}
    unknown = await run_cli("ledger", "show", run, "nope", database_url=audit_url)
    assert unknown.code == 2 and "no tool call" in unknown.stderr


async def test_cli_resolves_an_unknown_outcome(audit_url: str) -> None:
    run = f"run-{uuid.uuid4().hex[:8]}"
    async with await Database.connect(audit_url) as db:
        ledger = ToolLedger(db, await KeyRing.open(db, LocalKek(TEST_KEK)))

        async def crash(args: dict[str, Any], context: CallContext) -> None:
            raise ConnectionResetError("bank hung up")

        outcome = await ledger.execute(ToolCall(run, "wire-1", "wire", {}), crash)
        assert outcome.status is CallStatus.OUTCOME_UNKNOWN
        await ledger.close()
    resolved = await run_cli(
        "ledger",
        "resolve",
        run,
        "wire-1",
        "--failed",
        "--by",
        "ops-carl",
        "--json",
        database_url=audit_url,
        env=kek_env(),
    )
    assert resolved.code == 0, resolved.stderr
    assert json.loads(resolved.stdout)["status"] == "failed"
    again = await run_cli(
        "ledger",
        "resolve",
        run,
        "wire-1",
        "--succeeded",
        "--by",
        "ops-carl",
        database_url=audit_url,
        env=kek_env(),
    )
    assert again.code == 2 and "not outcome_unknown" in again.stderr


async def test_export_is_incremental_and_each_event_rechecks(
    audit_url: str, seeded: dict[str, Any]
) -> None:
    full = await run_cli("ledger", "export", "--format", "jsonl", database_url=audit_url)
    assert full.code == 0, full.stderr
    lines = [json.loads(line) for line in full.stdout.splitlines()]
    async with await Database.connect(audit_url) as db:
        in_order = [e.position async for e in Journal(db).read_all()]
        async with db.connection() as conn:
            login = await conn.fetchval("SELECT session_user")
    assert [e["position"] for e in lines] == in_order
    for exported in lines:
        canonical = event_bytes(
            exported["stream_id"],
            exported["version"],
            exported["type"],
            exported["actor"],
            datetime.fromisoformat(exported["recorded_at"]),
            exported["data"],
            tag_version=exported["tag_version"],
            login=exported["login"],
        )
        # Every event the code of today appends, with the login that wrote it.
        assert (exported["tag_version"], exported["login"]) == (3, login)
        assert chain_hash(bytes.fromhex(exported["prev_hash"]), canonical).hex() == exported["hash"]
    middle = lines[len(lines) // 2]["position"]
    rest = await run_cli("ledger", "export", "--after", str(middle), database_url=audit_url)
    assert [json.loads(line) for line in rest.stdout.splitlines()] == lines[len(lines) // 2 + 1 :]
