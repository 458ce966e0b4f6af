"""Reviewer names are whole values: a name with a comma is one reviewer, who decided an approval is
an array, and who approved a call is read from the call's own stream and row (not from the
approvals table)."""

from __future__ import annotations

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
from ledger.calls.service import ToolLedger
from ledger.errors import ProjectionError
from ledger.journal import Journal, NewEvent
from ledger.journal.projection import facts, fold
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database

from .support.processes import TEST_KEK, kek_env, run_cli

COMMA = "alice,mallory"


@pytest.fixture
async def scratch_url(server_url: str) -> AsyncIterator[str]:
    from tests.support.directory import list_reviewers
    from tests.support.scratch import scratch_database

    async with scratch_database(server_url, prefix="signoff_test") as url:
        await list_reviewers(url, COMMA, "bob")
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
            policy=ApprovalPolicy(approvers=frozenset({COMMA, "bob"}), quorum=2),
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


def test_a_decision_without_its_deciders_list_or_its_groups_does_not_fold() -> None:
    """`decided_by` is a list of whole names, and a decision names the groups it was made with
    (empty or not). One text of names (which a comma would split), or no groups, is not a
    decision Signoff writes: the stream does not fold, and verify reports it."""
    at = datetime(2026, 12, 1, 9, 0, tzinfo=UTC).isoformat()
    requested = {
        "run_id": "run-1",
        "thread_id": None,
        "tool": "refund",
        "kind": "tool_call",
        "call_id": "c-1",
        "args_digest": "d" * 64,
        "binding": "b" * 64,
        "policy": ApprovalPolicy().to_json(),
        "thread_config": None,
        "requested_at": at,
        "expires_at": None,
    }
    decided = {"reviewer": COMMA, "decision": "approve", "at": at, "groups": [], "final": True}
    decided["decided_by"] = [COMMA]
    stream = stream_of("apr-1")

    def folded(data: dict[str, Any]) -> Any:
        events = [
            NewEvent("approval.requested", requested, actor="agent"),
            NewEvent("approval.decided", data, actor=COMMA),
        ]
        return fold(APPROVALS, facts(stream, events))

    assert folded(decided).decided_by == (COMMA,)
    with pytest.raises(ProjectionError, match="decided_by is not a list"):
        folded(decided | {"decided_by": COMMA})
    with pytest.raises(ProjectionError, match="groups"):
        folded({k: v for k, v in decided.items() if k != "groups"})


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
        "groups": [],
    }
