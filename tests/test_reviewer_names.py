"""Reviewer names are whole values: a name with a comma is one reviewer, who decided an approval is
an array, and who approved a call is read from the call's own stream and row (not from the
approvals table), also for calls made before the schema recorded it."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest

from approvals import (
    ApprovalPolicy,
    ApprovalStore,
    Decision,
    DecisionKind,
    Review,
    approval_gate,
)
from approvals.projection import APPROVALS, stream_of
from ledger.audit.queries import CallFilter, call_story, find_calls
from ledger.calls.model import CallContext, ToolCall
from ledger.calls.projection import CALLS
from ledger.calls.service import ToolLedger
from ledger.canonical import canonical_json, event_bytes
from ledger.journal import Journal, NewEvent
from ledger.journal.projection import facts, fold
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database, migrate

from .processes import TEST_KEK, kek_env, run_cli

COMMA = "alice,mallory"


@pytest.fixture
async def scratch_url(server_url: str) -> AsyncIterator[str]:
    from tests.support.scratch import scratch_database

    async with scratch_database(server_url, prefix="signoff_test") as url:
        yield url


async def _ok(args: dict[str, Any], context: CallContext) -> dict[str, Any]:
    return {"ok": True}


async def test_a_reviewer_whose_name_has_a_comma_is_one_reviewer(scratch_url: str) -> None:
    run = f"run-{uuid.uuid4().hex[:8]}"
    args = {"amount": 10}
    async with await Database.connect(scratch_url) as db:
        ring = await KeyRing.open(db, LocalKek(TEST_KEK))
        store, ledger = ApprovalStore(db, ring), ToolLedger(db, ring)
        approval = await store.request(
            run_id=run, tool="refund", args=args, call_id="refund-1", requested_by="agent"
        )
        decided = await store.decide(approval.approval_id, Decision.approve(), COMMA)
        assert decided.decided_by == (COMMA,)
        gate = approval_gate(store, approval.approval_id, f"{run}/refund-1", args)
        await ledger.execute(ToolCall(run, "refund-1", "refund", args), _ok, gate=gate)
        await store.close()

        # The call's own stream says which approval and reviewers allowed it.
        story = await call_story(db, run, "refund-1")
        started = story.events[0].data
        assert (started["approval_id"], started["approved_by"]) == (approval.approval_id, [COMMA])
        assert story.approved_by == (COMMA,)
        assert story.approval_events[0].type == "approval.requested"

        assert await find_calls(db, CallFilter(approved_by="mallory", run_id=run)) == []
        assert await find_calls(db, CallFilter(approved_by="alice", run_id=run)) == []
        found = await find_calls(db, CallFilter(approved_by=COMMA, run_id=run))
        assert [(c.call_id, by) for c, by in found] == [("refund-1", (COMMA,))]
        for who, expected in (("mallory", []), (COMMA, [[COMMA]])):
            shown = await run_cli(
                "ledger", "calls", "--run", run, "--approved-by", who, "--json",
                database_url=scratch_url, env=kek_env(),
            )  # fmt: skip
            assert shown.code == 0, shown.stderr
            assert [c["approved_by"] for c in json.loads(shown.stdout)["calls"]] == expected

        # Audit reads the call, not the approvals table: changing that table changes nothing.
        async with db.connection() as conn:
            await conn.execute(
                "UPDATE approvals SET decided_by = '{mallory}' WHERE approval_id = $1",
                approval.approval_id,
            )
        assert await find_calls(db, CallFilter(approved_by="mallory", run_id=run)) == []

        # And the call's approved_by is checked against its stream.
        assert await ledger.verify_projection() == []
        async with db.connection() as conn:
            await conn.execute(
                "UPDATE tool_calls SET approved_by = '{mallory}' WHERE run_id = $1", run
            )
        problems = await ledger.verify_projection()
        assert len(problems) == 1 and "refund-1" in problems[0], problems
        await ledger.close()


async def test_a_quorum_records_every_approver_by_whole_name(scratch_url: str) -> None:
    async with await Database.connect(scratch_url) as db:
        ring = await KeyRing.open(db, LocalKek(TEST_KEK))
        store = ApprovalStore(db, ring)
        approval = await store.request(
            run_id="run-q",
            tool="refund",
            args={},
            call_id="c-1",
            requested_by="agent",
            policy=ApprovalPolicy(quorum=2),
        )
        await store.decide(approval.approval_id, Decision.approve(), COMMA)
        done = await store.decide(approval.approval_id, Decision.approve(), "bob")
        assert done.decided_by == (COMMA, "bob")
        assert done.approvers == (COMMA, "bob")
        events = await Journal(db).read_stream(stream_of(approval.approval_id))
        assert events[-1].data["decided_by"] == [COMMA, "bob"]
        async with db.connection() as conn:
            column = await conn.fetchval(
                "SELECT decided_by FROM approvals WHERE approval_id = $1", approval.approval_id
            )
        assert column == [COMMA, "bob"]
        assert await store.verify_projection() == []
        await store.close()


# -- data written under schema 0004, before names were arrays and calls said who approved --------


def _at() -> str:
    return datetime.now(UTC).isoformat()


async def _old_approval(
    db: Database, approval_id: str, run: str, call_id: str, reviews: list[tuple[str, str]]
) -> None:
    """An approval as the code of schema 0004 wrote it: `decided_by` joined with commas."""
    requested = {
        "run_id": run,
        "thread_id": None,
        "tool": "refund",
        "kind": "tool_call",
        "call_id": call_id,
        "args_digest": "0" * 64,
        "args_sealed": "c2VhbGVk",
        "binding": "0" * 64,
        "policy": ApprovalPolicy(quorum=len(reviews)).to_json(),
        "thread_config": None,
        "requested_at": _at(),
        "expires_at": None,
    }
    events = [NewEvent("approval.requested", requested, actor="agent")]
    for n, (reviewer, kind) in enumerate(reviews, start=1):
        data: dict[str, Any] = {"reviewer": reviewer, "decision": kind, "at": _at()}
        final = n == len(reviews)
        data["final"] = final
        if final:
            names = {r for r, k in reviews if k == "approve"} if kind == "approve" else {reviewer}
            data["decided_by"] = ",".join(sorted(names))
        events.append(NewEvent("approval.decided", data, actor=reviewer))
    consumed = {"task_run_id": f"{run}/{call_id}", "at": _at()}
    events.append(NewEvent("approval.consumed", consumed, actor=f"{run}/{call_id}"))
    state = fold(APPROVALS, facts(stream_of(approval_id), events))
    await _old_append(db, stream_of(approval_id), events)
    async with db.connection() as conn:
        await conn.execute(
            """INSERT INTO approvals (approval_id, run_id, thread_id, tool, kind, call_id,
                args_digest, binding, requested_by, policy, status, reviews, decided_by,
                decided_at, expires_at, consumed_by, consumed_at, thread_config, requested_at,
                version)
            VALUES ($1, $2, NULL, 'refund', 'tool_call', $3, $4, $4, 'agent', $5::jsonb, $6,
                $7::jsonb, $8, $9, NULL, $10, $11, NULL, $12, $13)""",
            approval_id,
            run,
            call_id,
            "0" * 64,
            json.dumps(state.policy.to_json()),
            str(state.status),
            json.dumps([r.to_json() for r in state.reviews]),
            events[-2].data["decided_by"],
            state.decided_at,
            state.consumed_by,
            state.consumed_at,
            state.requested_at,
            state.version,
        )


async def _old_append(db: Database, stream: str, events: list[NewEvent]) -> None:
    """Append as clients did before schema 0010: they sent the times and canonical bytes."""
    now = datetime.now(UTC)
    payloads = [canonical_json(e.data) for e in events]
    canonical = [
        event_bytes(stream, i, e.type, e.actor, now, payload, tag_version=1)
        for i, (e, payload) in enumerate(zip(events, payloads, strict=True), start=1)
    ]
    async with db.connection() as conn:
        await conn.fetchval(
            "SELECT signoff_append($1, 0, $2, $3, $4, $5, $6, NULL)",
            stream,
            [e.type for e in events],
            payloads,
            [e.actor for e in events],
            [now] * len(events),
            canonical,
        )


async def _old_call(db: Database, run: str, call_id: str, approval_id: str | None) -> None:
    """A finished call as the code of schema 0004 recorded it: no approvers, no approval stream."""
    started = {
        "run_id": run,
        "call_id": call_id,
        "tool": "refund",
        "effect": "single_attempt",
        "once_per_run": False,
        "request_digest": "1" * 64,
        "args_digest": "1" * 64,
        "idempotency_key": f"{run}/0/{call_id}",
        "approval_id": approval_id,
        "worker_id": "old-worker",
        "at": _at(),
    }
    events = [
        NewEvent("call.started", started, actor="old-worker"),
        NewEvent("call.succeeded", {"attempt": 1, "result_digest": "2" * 64, "at": _at()}, "w"),
    ]
    r = fold(CALLS, facts(f"call:{run}/{call_id}", events))
    await _old_append(db, f"call:{run}/{call_id}", events)
    async with db.connection() as conn:
        await conn.execute(
            """INSERT INTO tool_calls (run_id, call_id, tool, effect, once_per_run,
                request_digest, args_digest, args_sealed, idempotency_key, approval_id, status,
                attempts, worker_id, result_digest, result_sealed, started_at, finished_at,
                version)
            VALUES ($1, $2, $3, $4, $5, $6, $7, '\\x00', $8, $9, $10, $11, $12, $13, '\\x00',
                $14, $15, $16)""",
            r.run_id,
            r.call_id,
            r.tool,
            str(r.effect),
            r.once_per_run,
            r.request_digest,
            r.args_digest,
            r.idempotency_key,
            r.approval_id,
            str(r.status),
            r.attempts,
            r.worker_id,
            r.result_digest,
            r.started_at,
            r.finished_at,
            r.version,
        )


async def test_calls_approved_before_migration_0005_keep_their_approvers_and_verify(
    scratch_url: str,
) -> None:
    await asyncio.to_thread(migrate.downgrade, scratch_url, "0004")
    run = f"run-{uuid.uuid4().hex[:8]}"
    approved, rejected = f"apr-{uuid.uuid4().hex}", f"apr-{uuid.uuid4().hex}"
    async with await Database.connect(scratch_url, check_schema=False) as db:
        await _old_approval(db, approved, run, "c-1", [(COMMA, "approve"), ("bob", "approve")])
        await _old_approval(db, rejected, run, "c-2", [("carol", "reject")])
        await _old_call(db, run, "c-1", approved)
        await _old_call(db, run, "c-2", rejected)
        await _old_call(db, run, "c-3", None)

    await asyncio.to_thread(migrate.upgrade, scratch_url)
    async with await Database.connect(scratch_url) as db:
        # No new keys: 0007's downgrade keeps no key of the purposes it added (value_mac), so
        # a database holding one cannot go back below it, which this test does at its end.
        ring = await KeyRing.open(db, LocalKek(TEST_KEK), create_missing=False)
        ledger, store = ToolLedger(db, ring), ApprovalStore(db, ring)
        assert await ledger.verify_projection() == []
        assert await store.verify_projection() == []
        assert (await store.get(approved)).decided_by == (COMMA, "bob")
        assert (await store.get(rejected)).decided_by == ("carol",)
        calls = {c.call_id: by for c, by in await find_calls(db, CallFilter(run_id=run))}
        assert calls == {"c-1": (COMMA, "bob"), "c-2": (), "c-3": ()}
        assert await find_calls(db, CallFilter(approved_by="mallory", run_id=run)) == []
        story = await call_story(db, run, "c-1")
        assert [e.type for e in story.approval_events][:2] == [
            "approval.requested",
            "approval.decided",
        ]
        await ledger.close()
        await store.close()

    await asyncio.to_thread(migrate.downgrade, scratch_url, "0004")
    async with await Database.connect(scratch_url, check_schema=False) as db, db.connection() as c:
        joined = await c.fetchval(
            "SELECT decided_by FROM approvals WHERE approval_id = $1", approved
        )
    assert joined == f"{COMMA},bob"


def test_a_review_is_the_same_after_its_json_and_hides_ciphertexts_for_display() -> None:
    at = datetime(2026, 12, 1, 9, 0, 0, 123456, tzinfo=UTC)
    edit = Review(COMMA, DecisionKind.EDIT, at, args_digest="d" * 64, args_sealed="c2VhbGVk")
    assert Review.from_json(edit.to_json()) == edit
    event = edit.to_json() | {"final": True, "decided_by": [COMMA]}
    assert Review.from_json(event) == edit  # the event's own fields are not the review's
    assert edit.to_json(sealed=False) == {
        "reviewer": COMMA,
        "decision": "edit",
        "at": at.isoformat(),
        "args_digest": "d" * 64,
    }
