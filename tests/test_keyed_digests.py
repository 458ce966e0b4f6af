"""Keyed digests and sealed reasons: what an auditor or an export sees of arguments, results and
a reviewer's reasons gives nothing away without the key, and everything that compares digests
or needs the reason in clear still works, across a rotation of the value-MAC key."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from adapters.langgraph.tools import tool_message
from adapters.runtime import DecisionConflict, decide_once
from approvals import (
    ApprovalStore,
    Decision,
    TokenBindingMismatch,
    binding_of,
)
from approvals.gate import approval_gate
from approvals.projection import stream_of
from ledger.audit.export import export_events
from ledger.calls.model import CallContext, CallStatus, ToolCall, ToolPolicy
from ledger.calls.service import ToolLedger
from ledger.canonical import canonical_json
from ledger.errors import InvalidToolCall
from ledger.keys import KeyRing, LocalKek, Purpose
from ledger.keys.digests import digest_key_id, matches, text_digest
from ledger.store import Database

from .support.processes import TEST_KEK

ORDER_ID = "A-1042"
ARGS = {"order_id": ORDER_ID, "amount": 120.0}
REASON = "customer Jane Roe, 12 Elm St, card ending 4242: refund already paid by phone"


@pytest.fixture(scope="module")
async def kdb(server_url: str) -> AsyncIterator[Database]:
    """A database of this module's own: its tests rotate the value-MAC key."""
    from tests.support.directory import list_reviewers
    from tests.support.scratch import scratch_database

    async with scratch_database(server_url, prefix="signoff_digests") as url:
        await list_reviewers(url)
        database = await Database.connect(url)
        yield database
        await database.close()


@pytest.fixture(scope="module")
async def kring(kdb: Database) -> KeyRing:
    return await KeyRing.open(kdb, LocalKek(TEST_KEK))


@pytest.fixture(scope="module")
async def kstore(kdb: Database, kring: KeyRing) -> AsyncIterator[ApprovalStore]:
    store = ApprovalStore(kdb, kring, poll_interval=0.05)
    yield store
    await store.close()


@pytest.fixture(scope="module")
async def kledger(kdb: Database, kring: KeyRing) -> AsyncIterator[ToolLedger]:
    ledger = ToolLedger(kdb, kring, lease_seconds=1.0, poll_interval=0.05)
    yield ledger
    await ledger.close()


def _sha(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


def _run() -> str:
    return f"run-{uuid.uuid4().hex[:8]}"


async def _refund(args: dict[str, Any], context: CallContext) -> dict[str, Any]:
    return {"refunded": args["order_id"], "amount": args["amount"]}


def _strings(value: Any) -> list[str]:
    """Every string in a JSON-like value, keys included."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(value, list | tuple):
        return [s for v in value for s in _strings(v)]
    return []


async def _as_auditor(db: Database, run_id: str) -> list[dict[str, Any]]:
    """What the auditor role reads of one run: its rows of every audit view and its events."""
    conn = await asyncpg.connect(db.url)
    try:
        async with conn.transaction():
            await conn.execute("SET LOCAL ROLE signoff_auditor")
            rows = [
                *await conn.fetch("SELECT * FROM audit_tool_calls WHERE run_id = $1", run_id),
                *await conn.fetch("SELECT * FROM audit_approvals WHERE run_id = $1", run_id),
                *await conn.fetch(
                    "SELECT * FROM audit_events WHERE data::text LIKE '%' || $1 || '%'", run_id
                ),
            ]
    finally:
        await conn.close()
    seen = [dict(r) for r in rows]
    for row in seen:
        if isinstance(row.get("data"), str):
            row["data"] = json.loads(row["data"])
    return seen


async def _exported(db: Database, run_id: str) -> list[dict[str, Any]]:
    found = []
    async for event in export_events(db):
        if run_id in event.data:
            found.append({"data": json.loads(event.data), "stream_id": event.stream_id})
    return found


async def test_an_auditor_and_an_export_see_keyed_digests_that_no_guessing_loop_inverts(
    kdb: Database, kring: KeyRing, kstore: ApprovalStore, kledger: ToolLedger
) -> None:
    run = _run()
    approval = await kstore.request(
        run_id=run, tool="refund", args=ARGS, call_id="c1", requested_by="agent"
    )
    await kstore.decide(approval.approval_id, Decision.approve(), "alice")
    gate = approval_gate(kstore, approval.approval_id, f"{run}/c1", ARGS)
    outcome = await kledger.execute(ToolCall(run, "c1", "refund", ARGS), _refund, gate=gate)
    assert outcome.status is CallStatus.SUCCEEDED

    seen = [*await _as_auditor(kdb, run), *await _exported(kdb, run)]
    strings = set(_strings(seen))
    digests = {s for s in strings if s.startswith("hmac:")}
    # The finding's loop: candidate order ids, hashed with plain SHA-256, against every
    # digest and binding the auditor or an export shows (hex parts of keyed digests too).
    visible = strings | {d.rpartition(":")[2] for d in digests}
    candidates = [{"order_id": f"A-{n}", "amount": 120.0} for n in range(2000)]
    found = [
        c
        for c in candidates
        if _sha(c) in visible
        or binding_of(run, "refund", "tool_call", _sha(c), "c1", approval.approval_id) in visible
    ]
    assert found == []
    assert _sha(ARGS) not in visible and _sha(outcome.result) not in visible
    # Keyed instead, each naming its key: the arguments' (the request's is the same) and the
    # result's.
    assert len(digests) == 2
    vmac = kring.active_key_id(Purpose.VALUE_MAC)
    assert {digest_key_id(d) for d in digests} == {vmac}
    # With the key the same loop finds it: the digests do name these arguments.
    keyed = [c for c in candidates if text_digest(kring, canonical_json(c)) in digests]
    assert keyed == [ARGS]


async def test_a_reject_reason_is_sealed_everywhere_and_still_reaches_the_agent(
    kdb: Database, kring: KeyRing, kstore: ApprovalStore, kledger: ToolLedger
) -> None:
    run = _run()
    approval = await kstore.request(
        run_id=run, tool="refund", args=ARGS, call_id="c1", requested_by="agent"
    )
    await kstore.decide(approval.approval_id, Decision.reject(REASON), "alice")
    gate = approval_gate(kstore, approval.approval_id, f"{run}/c1", ARGS)
    outcome = await kledger.execute(ToolCall(run, "c1", "refund", ARGS), _refund, gate=gate)

    # The agent receives it: the outcome, and the message the model reads.
    assert outcome.status is CallStatus.DENIED and outcome.error == REASON
    message = tool_message(outcome, {"name": "refund", "id": "c1"})
    assert REASON in str(message.content)
    # A reviewer revealing the approval reads it.
    revealed = await kstore.get(approval.approval_id, reveal=True)
    assert revealed.decision is not None and revealed.decision.reason == REASON

    # Nowhere in clear: events, the approvals row, the call's row, audit views, the export.
    needle = "Jane Roe"
    async with kdb.connection() as conn:
        assert not await conn.fetchval(
            "SELECT count(*) FROM events WHERE data::text LIKE '%' || $1 || '%'", needle
        )
        assert not await conn.fetchval(
            "SELECT count(*) FROM approvals WHERE reviews::text LIKE '%' || $1 || '%'", needle
        )
        rows = await conn.fetch("SELECT * FROM tool_calls WHERE run_id = $1", run)
        decided = await conn.fetchval(
            "SELECT data::text FROM events WHERE stream_id = $1 AND type = 'approval.decided'",
            stream_of(approval.approval_id),
        )
    assert needle not in json.dumps([dict(r) for r in rows], default=str)
    assert needle not in json.dumps(await _as_auditor(kdb, run), default=str)
    assert needle not in json.dumps(await _exported(kdb, run))
    # What an auditor sees instead: that there is a reason, sealed.
    assert "reason_sealed" in json.loads(decided) and "reason" not in json.loads(decided)

    # Delivered again (same reason) it is a duplicate; another reason conflicts.
    again = await decide_once(kstore, approval.approval_id, Decision.reject(REASON), "alice")
    assert again.duplicate
    with pytest.raises(DecisionConflict):
        await decide_once(kstore, approval.approval_id, Decision.reject("other"), "alice")


async def test_requests_replays_tokens_and_edits_still_match_after_a_value_mac_rotation(
    kdb: Database, kring: KeyRing, kstore: ApprovalStore, kledger: ToolLedger
) -> None:
    run = _run()
    asked = await kstore.request(
        run_id=run, tool="refund", args=ARGS, call_id="c1", requested_by="agent"
    )
    edit = await kstore.request(
        run_id=run, tool="refund", args=ARGS, call_id="c2", requested_by="agent"
    )
    edited = {"order_id": ORDER_ID, "amount": 60.0}
    await kstore.decide(edit.approval_id, Decision.edit(edited), "alice")
    await kstore.decide(asked.approval_id, Decision.approve(), "alice")
    token = await kstore.issue_token(asked.approval_id)
    call = ToolCall(run, "c3", "refund", ARGS)
    first = await kledger.execute(call, _refund, ToolPolicy())
    before = kring.active_key_id(Purpose.VALUE_MAC)

    after = await kring.rotate(Purpose.VALUE_MAC)
    assert after != before

    # The same (run, call id, arguments) finds its approval, written under the old key.
    again = await kstore.request(
        run_id=run, tool="refund", args=ARGS, call_id="c1", requested_by="agent"
    )
    assert again.approval_id == asked.approval_id and digest_key_id(again.args_digest) == before
    # A token issued before the rotation still verifies for these arguments only.
    verified = await kstore.verify_token(token, run_id=run, tool="refund", args=ARGS, call_id="c1")
    assert verified.approval_id == asked.approval_id
    with pytest.raises(TokenBindingMismatch):
        await kstore.verify_token(
            token, run_id=run, tool="refund", args={**ARGS, "amount": 1.0}, call_id="c1"
        )
    # The same edit delivered again is a duplicate, another one a conflict.
    assert (await decide_once(kstore, edit.approval_id, Decision.edit(edited), "alice")).duplicate
    with pytest.raises(DecisionConflict):
        await decide_once(kstore, edit.approval_id, Decision.edit(ARGS), "alice")
    # A finished call replays (its request and result digests checked under the old key); the
    # same call id with other arguments is still refused.
    replay = await kledger.execute(call, _refund, ToolPolicy())
    assert replay.replayed and replay.result == first.result
    with pytest.raises(InvalidToolCall, match="other arguments"):
        await kledger.execute(ToolCall(run, "c3", "refund", {**ARGS, "amount": 1.0}), _refund)
    # New records name the new key.
    fresh = await kledger.execute(ToolCall(run, "c4", "refund", ARGS), _refund)
    record = await kledger.get(run, "c4")
    assert fresh.status is CallStatus.SUCCEEDED
    assert {digest_key_id(record.request_digest), digest_key_id(record.args_digest)} == {after}
    assert await matches(kring, record.args_digest, canonical_json(ARGS))
    assert not await matches(kring, record.args_digest, canonical_json(edited))
    # Only keyed digests match: the plain SHA-256 of the same arguments matches nothing.
    assert not await matches(kring, _sha(ARGS), canonical_json(ARGS))


async def test_a_process_that_has_not_seen_the_new_value_mac_key_still_replays_its_calls(
    kdb: Database, kring: KeyRing, kledger: ToolLedger
) -> None:
    stale = KeyRing(kdb, LocalKek(TEST_KEK), refresh_seconds=3600)
    await stale.refresh()
    other = ToolLedger(kdb, stale, lease_seconds=1.0, poll_interval=0.05)
    try:
        new_key = await kring.rotate(Purpose.VALUE_MAC)
        call = ToolCall(_run(), "c1", "refund", ARGS)
        first = await kledger.execute(call, _refund)
        assert digest_key_id((await kledger.get(call.run_id, "c1")).result_digest or "") == new_key
        # The other process writes under its cached key until it refreshes, and checks a
        # digest under a key it has not seen by loading it on demand.
        assert stale.active_key_id(Purpose.VALUE_MAC) != new_key
        replay = await other.execute(call, _refund)
        assert replay.replayed and replay.result == first.result
    finally:
        await other.close()
