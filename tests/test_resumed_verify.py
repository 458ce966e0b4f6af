"""`signoff ledger verify --since-digest OLD` resumes every check from a verified digest: the
events after it and the streams they touch, their chains anchored to OLD's signed root, the
global order of what is new, the touched streams' rows and stream checks. Forgeries are plain
SQL on the test's superuser connection (the owner)."""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from approvals import ApprovalStore, Decision
from ledger.audit.digest import take_digest
from ledger.calls.model import Effect, ToolCall, ToolPolicy
from ledger.calls.service import ToolLedger
from ledger.canonical import GENESIS_HASH, chain_hash, jcs_json
from ledger.journal import Journal, NewEvent
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database

from .support.directory import list_reviewers
from .support.processes import TEST_KEK, CliResult, kek_env, run_cli
from .test_digest import settle
from .test_ledger_verify import FUTURE_TXID, double, fill, forge_event

CALL = "call:run%2Fafter/c3"  # the stream of the call made after the digest


@dataclass(frozen=True)
class Resumable:
    url: str
    db: Database
    old: Path  # the earlier digest's file
    notes: str  # a stream with an event before the digest and one after
    decided: str  # an approval requested before the digest, decided after
    untouched: str  # an approval no event after the digest touches
    new_events: int  # events after the digest in the global order


@pytest.fixture
async def resumable(fresh_database_url: str, tmp_path: Path) -> AsyncIterator[Resumable]:
    await list_reviewers(fresh_database_url)
    async with await Database.connect(fresh_database_url) as db:
        notes = await fill(db)
        ring = await KeyRing.open(db, LocalKek(TEST_KEK))
        store = ApprovalStore(db, ring)
        calls = ToolLedger(db, ring)
        journal = Journal(db)
        try:
            pending = await store.request(
                run_id=f"run-{uuid.uuid4().hex[:8]}",
                tool="refund",
                args={"n": 3},
                call_id="c9",
                requested_by="agent",
            )
            await settle(db)
            old = await take_digest(db, ring)
            await journal.append(
                notes, [NewEvent("noted", {"n": 2}, "auditor")], expected_version=1
            )
            await store.decide(pending.approval_id, Decision.approve(), "alice")
            # A run id with a slash: its call's stream is percent-encoded.
            call = ToolCall("run/after", "c3", "lookup", {"n": 4})
            await calls.execute(call, double, ToolPolicy(Effect.READ))
            for i in range(5):
                events = [NewEvent("noted", {"i": i, "j": j}, "auditor") for j in range(3)]
                await journal.append(f"note:{uuid.uuid4().hex}", events, expected_version=0)
        finally:
            await store.close()
            await calls.close()
        await settle(db)
        async with db.connection() as conn:
            untouched = await conn.fetchval(
                "SELECT approval_id FROM approvals WHERE approval_id <> $1", pending.approval_id
            )
        new_events = len([e async for e in journal.read_all(after=old.last_position)])
        path = tmp_path / "old.json"
        path.write_text(old.to_json())
        yield Resumable(
            fresh_database_url, db, path, notes, pending.approval_id, untouched, new_events
        )


async def resume(r: Resumable, *args: str) -> CliResult:
    return await run_cli(
        "ledger", "verify", "--since-digest", str(r.old), *args, database_url=r.url, env=kek_env()
    )


async def resumed_json(r: Resumable) -> dict[str, Any]:
    result = await resume(r, "--json")
    assert result.code in (0, 1), result.stdout + result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    return report


async def owner_edit(db: Database, sql: str, *args: object) -> None:
    """An UPDATE of `events` past its append-only trigger, as the owner could."""
    async with db.connection() as conn, conn.transaction():
        await conn.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
        await conn.execute(sql, *args)
        await conn.execute("ALTER TABLE events ENABLE TRIGGER events_append_only")


async def test_an_intact_journal_resumes_reading_only_the_new_events(
    resumable: Resumable,
) -> None:
    r = resumable
    old = json.loads(r.old.read_text())
    report = await resumed_json(r)
    assert report["ok"] is True, report["problems"]
    resumed = report["resumed"]
    call_events = len(await Journal(r.db).read_stream(CALL))
    assert resumed["new_events"] == report["events"] == r.new_events == 2 + call_events + 15
    assert resumed["tree_size"] == old["tree_size"] and resumed["problems"] == []
    assert resumed["last_position"] == old["last_position"]
    # Eight streams: notes, the approval decided after, the call, five new ones. The two that
    # began before the digest are anchored to its root.
    assert report["streams"] == resumed["streams"] == 8 and resumed["anchored"] == 2
    assert {p["table"]: p["rows"] for p in report["projections"]} == {
        "approvals": 1,
        "tool_calls": 1,
        "reviewers": 0,
        "policy_sets": 0,
    }
    checks = {c["name"]: c["streams"] for c in report["stream_checks"]}
    assert checks["decision signatures and policies"] == 1
    assert report["order"]["events"] >= r.new_events
    text = await resume(r)
    assert text.code == 0, text.stdout + text.stderr
    first = text.stdout.splitlines()[0]
    assert first.startswith("ledger intact since the earlier digest")
    assert f"tree size {old['tree_size']}, last position {old['last_position']}" in first
    assert f"read {r.new_events} new events" in first
    assert "not read (use --full)" in text.stdout
    full = await run_cli("ledger", "verify", "--json", database_url=r.url, env=kek_env())
    whole = json.loads(full.stdout)
    assert whole["ok"] and whole["resumed"] is None and whole["events"] > r.new_events


async def test_a_new_digest_checks_from_the_earlier_one_and_a_forged_one_resumes_nothing(
    resumable: Resumable, tmp_path: Path
) -> None:
    r = resumable
    ring = await KeyRing.open(r.db, LocalKek(TEST_KEK))
    new = tmp_path / "new.json"
    new.write_text((await take_digest(r.db, ring)).to_json())
    both = await resume(r, "--digest", str(new), "--json")
    report = json.loads(both.stdout)
    assert both.code == 0 and report["digest"]["ok"], both.stdout + both.stderr
    assert report["resumed"]["new_events"] == r.new_events
    forged = json.loads(r.old.read_text())
    forged["root"] = os.urandom(32).hex()
    r.old.write_text(json.dumps(forged))
    refused = await resume(r)
    assert refused.code == 1 and "the earlier digest: " in refused.stdout.splitlines()[0]


@pytest.mark.parametrize(
    "tamper", ["data", "hash", "future txid", "earlier txid", "row", "call row"]
)
async def test_tampering_after_the_earlier_digest_is_found(
    resumable: Resumable, tamper: str
) -> None:
    r = resumable
    if tamper == "data":
        await owner_edit(
            r.db,
            "UPDATE events SET data = '{\"n\": 9}' WHERE stream_id = $1 AND version = 2",
            r.notes,
        )
        expected = f"hash chain: stream {r.notes!r} version 2"
    elif tamper == "hash":
        await owner_edit(
            r.db,
            "UPDATE events SET hash = $2 WHERE stream_id = $1 AND version = 2",
            r.notes,
            os.urandom(32),
        )
        expected = f"hash chain: stream {r.notes!r} version 2"
    elif tamper in ("future txid", "earlier txid"):
        first = (await Journal(r.db).read_stream(r.notes))[0]
        position = await forge_event(
            r.db, r.notes, FUTURE_TXID if tamper == "future txid" else first.txid
        )
        expected = f"global order: stream {r.notes!r} version 3 position {position}"
    elif tamper == "row":
        async with r.db.connection() as conn:
            await conn.execute(
                "UPDATE approvals SET requested_by = 'mallory' WHERE approval_id = $1", r.decided
            )
        expected = "projection approvals: "
    else:
        async with r.db.connection() as conn:
            await conn.execute("UPDATE tool_calls SET attempts = 7 WHERE stream_id = $1", CALL)
        expected = f"projection tool_calls: {CALL}"
    report = await resumed_json(r)
    assert report["ok"] is False
    assert any(p.startswith(expected) for p in report["problems"]), report["problems"]
    full = await run_cli(
        "ledger",
        "verify",
        "--full",
        "--since-digest",
        str(r.old),
        database_url=r.url,
        env=kek_env(),
    )
    assert full.code == 1 and expected in full.stdout, full.stdout


async def test_an_edit_before_the_digest_in_a_stream_touched_after_it_is_found(
    resumable: Resumable,
) -> None:
    """Rehashing the edited event and the new one after it keeps the chain whole: the anchor's
    inclusion proof against the earlier digest's root is what refuses it."""
    r = resumable
    before, after = await Journal(r.db).read_stream(r.notes)
    edited = dataclasses.replace(before, data_json=jcs_json({"n": 5}))
    edited_hash = chain_hash(GENESIS_HASH, edited.canonical_bytes())
    after_hash = chain_hash(edited_hash, after.canonical_bytes())
    await owner_edit(
        r.db,
        "UPDATE events SET data = $2::json, hash = $3 WHERE position = $1",
        before.position,
        edited.data_json,
        edited_hash,
    )
    await owner_edit(
        r.db, "UPDATE events SET hash = $2 WHERE position = $1", after.position, after_hash
    )
    assert (await Journal(r.db).verify()).ok, "the chains are rehashed whole"
    report = await resumed_json(r)
    # First (the chains come first); the edited rows' xmin is the global order's to name.
    problem = report["problems"][0]
    assert f"stream {r.notes!r} version 1 position {before.position}" in problem
    assert "is not leaf" in problem and "earlier digest's tree" in problem
    full = await run_cli("ledger", "verify", database_url=r.url, env=kek_env())
    assert full.code == 1 and "stored tree: tile 0/0" in full.stdout


async def test_an_edit_before_the_digest_without_a_new_hash_breaks_the_chain(
    resumable: Resumable,
) -> None:
    r = resumable
    await owner_edit(
        r.db, "UPDATE events SET data = '{\"n\": 7}' WHERE stream_id = $1 AND version = 1", r.notes
    )
    report = await resumed_json(r)
    assert report["problems"][0].startswith(f"hash chain: stream {r.notes!r} version 1")
    text = await resume(r)
    assert text.code == 1 and text.stdout.splitlines()[-1].startswith(
        f"resumed from the earlier digest (tree size {report['resumed']['tree_size']}, "
    )


async def test_a_row_of_a_stream_untouched_since_the_digest_is_left_to_a_full_check(
    resumable: Resumable,
) -> None:
    """The documented limit: a resumed check reads no stream the new events leave alone."""
    r = resumable
    async with r.db.connection() as conn:
        await conn.execute(
            "UPDATE approvals SET requested_by = 'mallory' WHERE approval_id = $1", r.untouched
        )
    resumed = await resume(r)
    assert resumed.code == 0, resumed.stdout
    assert "not read (use --full)" in resumed.stdout
    full = await resume(r, "--full")
    assert full.code == 1 and "first: projection approvals" in full.stdout
    assert r.untouched in full.stdout and "resumed from" not in full.stdout


async def test_usage_errors_without_a_digest_to_check_or_resume_from(
    resumable: Resumable,
) -> None:
    r = resumable
    for args in (("--full",), ("--public-keys", str(r.old))):
        result = await run_cli("ledger", "verify", *args, database_url=r.url, env=kek_env())
        assert result.code == 2 and "--since-digest" in result.stderr, result
