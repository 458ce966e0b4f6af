"""An approval's JSON in our shape and the field's (HITL, Agent Inbox), and decide bodies in
each of them, read into decisions or refused before anything is written."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from adapters.http.shapes import approval_document, decision_from_body
from adapters.runtime import decide_once
from adapters.runtime.hitl import decidable
from approvals import (
    Approval,
    ApprovalPolicy,
    ApprovalStatus,
    ApprovalStore,
    Decision,
    DecisionKind,
    DecisionNotAllowed,
    InvalidApprovalRequest,
)

ARGS = {"order_id": "A7", "amount": 120}
EDITED = {"order_id": "A7", "amount": 60}
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def approval(policy: ApprovalPolicy | None = None, **changes: Any) -> Approval:
    made = Approval(
        approval_id="apr-1",
        run_id="run-1",
        thread_id="thread-1",
        tool="refund",
        kind="tool_call",
        call_id="call-1",
        args_digest="d",
        binding="b",
        requested_by="agent",
        policy=policy or ApprovalPolicy(description="Refund a customer"),
        status=ApprovalStatus.PENDING,
        requested_at=NOW,
        expires_at=NOW + timedelta(hours=1),
    )
    return replace(made, **changes)


# -- documents -----------------------------------------------------------------------------


def test_a_document_carries_ours_hitl_and_agent_inbox() -> None:
    doc = approval_document(approval(), args=ARGS)
    assert doc["approval_id"] == "apr-1" and doc["run_id"] == "run-1"
    assert doc["thread_id"] == "thread-1" and doc["call_id"] == "call-1"
    assert doc["status"] == "pending" and doc["requested_by"] == "agent"
    assert doc["expires_at"] == (NOW + timedelta(hours=1)).isoformat()
    assert doc["policy"]["quorum"] == 1 and doc["policy"]["allow_self_approval"] is False
    assert doc["reviews"] == [] and doc["decided_by"] == []
    assert doc["votes"] == {"approved_by": [], "quorum": 1}
    assert doc["args"] == ARGS
    assert doc["allowed_decisions"] == ["approve", "reject", "edit", "respond"]
    assert doc["hitl"] == {
        "action_requests": [{"name": "refund", "args": ARGS, "description": "Refund a customer"}],
        "review_configs": [
            {"action_name": "refund", "allowed_decisions": ["approve", "reject", "edit", "respond"]}
        ],
    }
    assert doc["agent_inbox"] == {
        "action_request": {"action": "refund", "args": ARGS},
        "config": {
            "allow_accept": True,
            "allow_ignore": True,
            "allow_respond": True,
            "allow_edit": True,
        },
        "description": "Refund a customer",
    }
    json.dumps(doc)  # all of it is JSON


def test_a_document_shows_arguments_only_when_given() -> None:
    revealed = approval(args=ARGS)  # the store's reveal: the caller did not pass them on
    doc = approval_document(revealed, args=None)
    assert "args" not in doc
    assert doc["hitl"]["action_requests"][0]["args"] is None
    assert doc["agent_inbox"]["action_request"]["args"] is None
    assert "A7" not in json.dumps(doc)


def test_allowed_decisions_follow_the_policy() -> None:
    narrow = approval(ApprovalPolicy(allowed=frozenset({DecisionKind.APPROVE, DecisionKind.EDIT})))
    doc = approval_document(narrow, args=ARGS)
    assert doc["hitl"]["review_configs"][0]["allowed_decisions"] == ["approve", "edit"]
    assert doc["agent_inbox"]["config"] == {
        "allow_accept": True,
        "allow_ignore": False,
        "allow_respond": False,
        "allow_edit": True,
    }
    assert doc["description"] == "Approve refund?"
    # Under a quorum only approve and reject are possible, whatever `allowed` says.
    quorum = approval(ApprovalPolicy(quorum=2, approvers=frozenset({"a", "b"})))
    assert decidable(quorum.policy) == (DecisionKind.APPROVE, DecisionKind.REJECT)
    config = approval_document(quorum, args=None)["agent_inbox"]["config"]
    assert config["allow_edit"] is False and config["allow_respond"] is False


# -- decide bodies ---------------------------------------------------------------------------

BODIES: list[tuple[str, Any, Decision]] = [
    ("ours approve", {"decision": "approve"}, Decision.approve()),
    (
        "ours approve reason",
        {"decision": "approve", "reason": "ok"},
        Decision(DecisionKind.APPROVE, reason="ok"),
    ),
    ("ours reject", {"decision": "reject", "reason": "no"}, Decision.reject("no")),
    ("ours edit", {"decision": "edit", "args": EDITED}, Decision.edit(EDITED)),
    ("ours respond", {"decision": "respond", "message": "call me"}, Decision.respond("call me")),
    ("hitl approve", {"type": "approve"}, Decision.approve()),
    ("hitl reject", {"type": "reject", "message": "no"}, Decision.reject("no")),
    ("hitl reject bare", {"type": "reject"}, Decision.reject()),
    (
        "hitl edit",
        {"type": "edit", "edited_action": {"name": "refund", "args": EDITED}},
        Decision.edit(EDITED),
    ),
    ("hitl respond", {"type": "respond", "message": "call me"}, Decision.respond("call me")),
    ("hitl batch", {"decisions": [{"type": "reject", "message": "no"}]}, Decision.reject("no")),
    ("inbox accept", {"type": "accept", "args": None}, Decision.approve()),
    ("inbox accept bare", {"type": "accept"}, Decision.approve()),
    (
        "inbox accept request",
        {"type": "accept", "args": {"action": "refund", "args": ARGS}},
        Decision.approve(),
    ),
    ("inbox ignore", {"type": "ignore", "args": None}, Decision.reject()),
    ("inbox response", {"type": "response", "args": "call me"}, Decision.respond("call me")),
    (
        "inbox edit",
        {"type": "edit", "args": {"action": "refund", "args": EDITED}},
        Decision.edit(EDITED),
    ),
    ("inbox batch", {"decisions": [{"type": "ignore", "args": None}]}, Decision.reject()),
]


@pytest.mark.parametrize(("body", "expected"), [b[1:] for b in BODIES], ids=[b[0] for b in BODIES])
def test_every_shape_reads_into_its_decision(body: Any, expected: Decision) -> None:
    assert decision_from_body(body, approval(args=ARGS)) == expected


MALFORMED: list[tuple[str, Any]] = [
    ("not an object", ["approve"]),
    ("text", "approve"),
    ("null", None),
    ("empty", {}),
    ("unknown decision", {"decision": "maybe"}),
    ("decision not text", {"decision": ["approve"]}),
    ("decision unhashable", {"decision": {"approve": 1}}),
    ("both shapes", {"decision": "approve", "type": "approve"}),
    ("ours with edited_action", {"decision": "edit", "args": EDITED, "edited_action": {}}),
    ("ours edit without args", {"decision": "edit"}),
    ("ours edit args a list", {"decision": "edit", "args": [1, 2]}),
    ("ours edit args text", {"decision": "edit", "args": json.dumps(EDITED)}),
    ("ours args on approve", {"decision": "approve", "args": EDITED}),
    ("ours message on reject", {"decision": "reject", "message": "x"}),
    ("ours respond without message", {"decision": "respond"}),
    ("ours respond message a number", {"decision": "respond", "message": 7}),
    ("ours reason a dict", {"decision": "reject", "reason": {"why": "x"}}),
    ("ours unknown field", {"decision": "approve", "approver": "mallory"}),
    ("ours non-text key", {"decision": "approve", 1: "x"}),
    ("type unknown", {"type": "approved"}),
    ("type unhashable", {"type": ["approve"]}),
    ("type null", {"type": None}),
    (
        "hitl edit of another tool",
        {"type": "edit", "edited_action": {"name": "wire", "args": EDITED}},
    ),
    ("hitl edit args a list", {"type": "edit", "edited_action": {"name": "refund", "args": [1]}}),
    ("hitl edit without action", {"type": "edit", "edited_action": None}),
    (
        "hitl edit extra action key",
        {"type": "edit", "edited_action": {"name": "refund", "args": {}, "x": 1}},
    ),
    (
        "hitl edit both shapes",
        {"type": "edit", "edited_action": {"name": "refund", "args": EDITED}, "args": {}},
    ),
    ("hitl respond without message", {"type": "respond"}),
    ("hitl reject message a list", {"type": "reject", "message": ["no"]}),
    ("hitl approve with args", {"type": "approve", "args": EDITED}),
    ("batch of two", {"decisions": [{"type": "approve"}, {"type": "approve"}]}),
    ("batch of none", {"decisions": []}),
    ("batch not a list", {"decisions": {"type": "approve"}}),
    ("batch with more", {"decisions": [{"type": "approve"}], "type": "approve"}),
    ("batch of text", {"decisions": ["approve"]}),
    ("inbox edit of another tool", {"type": "edit", "args": {"action": "wire", "args": EDITED}}),
    ("inbox edit args a list", {"type": "edit", "args": {"action": "refund", "args": [1]}}),
    ("inbox edit flat args", {"type": "edit", "args": EDITED}),
    ("inbox response not text", {"type": "response", "args": {"text": "x"}}),
    ("inbox response null", {"type": "response", "args": None}),
    ("inbox ignore with args", {"type": "ignore", "args": "why"}),
    (
        "inbox accept of other args",
        {"type": "accept", "args": {"action": "refund", "args": EDITED}},
    ),
    ("inbox accept of another tool", {"type": "accept", "args": {"action": "wire", "args": ARGS}}),
    ("inbox extra field", {"type": "accept", "args": None, "reviewer": "mallory"}),
]


@pytest.mark.parametrize("body", [m[1] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_malformed_and_ambiguous_bodies_are_refused(body: Any) -> None:
    with pytest.raises(InvalidApprovalRequest):
        decision_from_body(body, approval(args=ARGS))


def test_decisions_the_policy_does_not_allow_are_refused() -> None:
    only_approve = approval(ApprovalPolicy(allowed=frozenset({DecisionKind.APPROVE})))
    for body in (
        {"decision": "reject"},
        {"type": "reject", "message": "no"},
        {"type": "ignore", "args": None},
        {"type": "edit", "edited_action": {"name": "refund", "args": EDITED}},
        {"type": "response", "args": "call me"},
    ):
        with pytest.raises(DecisionNotAllowed) as refused:
            decision_from_body(body, only_approve)
        assert refused.value.approval_id == "apr-1"
    assert decision_from_body({"type": "accept"}, only_approve) == Decision.approve()
    quorum = approval(ApprovalPolicy(quorum=2, any_reviewer=True))
    with pytest.raises(DecisionNotAllowed):
        decision_from_body({"decision": "edit", "args": EDITED}, quorum)


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


HOSTILE: list[tuple[str, Any]] = [
    ("args nested too deep", {"decision": "edit", "args": nested(200)}),
    (
        "hitl args nested too deep",
        {"type": "edit", "edited_action": {"name": "refund", "args": nested(10_000)}},
    ),
    (
        "accept nested too deep",
        {"type": "accept", "args": {"action": "refund", "args": nested(10_000)}},
    ),
    ("args with a non-text key", {"decision": "edit", "args": {1: "x"}}),
    ("args with a nested non-text key", {"decision": "edit", "args": {"a": {(1, 2): "x"}}}),
    ("args with a NaN", {"decision": "edit", "args": {"amount": float("nan")}}),
    ("args with a set", {"decision": "edit", "args": {"ids": {1, 2}}}),
    ("args with bytes", {"decision": "edit", "args": {"b": b"\x00"}}),
    ("args with a NUL", {"decision": "edit", "args": {"note": "a\x00b"}}),
    ("args with a lone surrogate", {"decision": "edit", "args": {"note": "\ud800"}}),
    ("args too big", {"decision": "edit", "args": {"note": "x" * (129 * 1024)}}),
    ("a huge integer", {"decision": "edit", "args": {"n": 10**5000}}),
    ("a reason too long", {"decision": "reject", "reason": "x" * (65 * 1024)}),
    ("a reason with a NUL", {"decision": "reject", "reason": "no\x00"}),
    ("a blank response", {"type": "respond", "message": "   "}),
    ("a huge action name", {"type": "edit", "edited_action": {"name": "r" * 10**6, "args": {}}}),
    ("a boolean decision", {"decision": True}),
    ("a tool name for a type", {"type": "refund"}),
]


@pytest.mark.parametrize("body", [h[1] for h in HOSTILE], ids=[h[0] for h in HOSTILE])
def test_hostile_bodies_are_refused_with_a_short_message(body: Any) -> None:
    with pytest.raises(InvalidApprovalRequest) as refused:
        decision_from_body(body, approval(args=ARGS))
    assert len(str(refused.value)) < 1000


# -- through the store -------------------------------------------------------------------------


async def asked(store: ApprovalStore, policy: ApprovalPolicy | None = None) -> Approval:
    return await store.request(
        run_id=f"shapes-{uuid.uuid4().hex[:8]}",
        tool="refund",
        args=ARGS,
        call_id="call-1",
        requested_by="agent",
        policy=policy,
    )


@pytest.mark.parametrize("body", [b[1] for b in BODIES], ids=[b[0] for b in BODIES])
async def test_each_shape_decides_through_the_store(store: ApprovalStore, body: Any) -> None:
    pending = await asked(store)
    shown = await store.get(pending.approval_id, reveal=True)
    doc = approval_document(shown, args=shown.args)
    assert doc["hitl"]["action_requests"][0]["args"] == ARGS
    decision = decision_from_body(body, shown)
    recorded = await decide_once(store, pending.approval_id, decision, "bob")
    assert not recorded.duplicate
    final = await store.get(pending.approval_id, reveal=True)
    assert final.decision is not None and final.decision.kind is decision.kind
    assert final.decision.args == decision.args and final.decision.message == decision.message
    assert await store.reason_of(final, final.reviews[-1]) == decision.reason
    after = approval_document(final, args=None)
    assert after["status"] == final.status.value and after["decided_by"] == ["bob"]
    assert [r["decision"] for r in after["reviews"]] == [decision.kind.value]
    approving = decision.kind is DecisionKind.APPROVE
    assert after["votes"]["approved_by"] == (["bob"] if approving else [])
    # The same body again is the same decision: a duplicate, nothing written.
    again = await decide_once(store, pending.approval_id, decision_from_body(body, final), "bob")
    assert again.duplicate and again.approval.version == final.version


async def test_a_refused_body_records_nothing(store: ApprovalStore) -> None:
    pending = await asked(store, ApprovalPolicy(allowed=frozenset({DecisionKind.APPROVE})))
    for body in (
        {"decision": "reject"},
        {"type": "edit", "edited_action": {"name": "x", "args": {}}},
    ):
        with pytest.raises((DecisionNotAllowed, InvalidApprovalRequest)):
            decision_from_body(body, pending)
    unchanged = await store.get(pending.approval_id)
    assert unchanged.version == pending.version and unchanged.status is ApprovalStatus.PENDING
