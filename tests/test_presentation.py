"""What a policy tells reviewers: headline and sensitive fields, irreversibility, the tool's
argument schema (checked as a JSON Schema, stored with the request, read back the same), and
who decides in plain words."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from adapters.runtime.documents import approval_json, policy_text
from approvals import ApprovalPolicy, ApprovalStore, InvalidApprovalRequest
from approvals.presentation import edit_problem
from ledger.store import Database

REFUND_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "amount": {"type": "number", "exclusiveMinimum": 0.0},
        "currency": {"type": "string", "enum": ["EUR", "USD"]},
        "order_id": {"type": "string"},
    },
    "required": ["amount", "currency", "order_id"],
}


@pytest.mark.parametrize(
    ("policy", "text"),
    [
        (
            ApprovalPolicy(),
            "self-confirm (the person at the agent, or any reviewer in the directory)",
        ),
        (ApprovalPolicy(any_reviewer=True), "any reviewer in the directory"),
        (ApprovalPolicy(any_reviewer=True, quorum=2), "2 reviewers in the directory"),
        (ApprovalPolicy(approvers=frozenset({"group:support-leads"})), "one of support-leads"),
        (ApprovalPolicy(approvers=frozenset({"bob", "alice"})), "alice or bob"),
        (ApprovalPolicy(approvers=frozenset({"cfo", "group:ops"})), "cfo or one of ops"),
        (
            ApprovalPolicy(approvers=frozenset({"alice", "bob", "group:ops"}), quorum=2),
            "2 of: alice, bob, members of ops",
        ),
    ],
)
def test_the_policy_says_who_decides_in_plain_words(policy: ApprovalPolicy, text: str) -> None:
    assert policy_text(policy) == text


@pytest.mark.parametrize(
    ("hints", "problem"),
    [
        ({"headline": "amount"}, "not a string"),
        ({"sensitive": [""]}, "non-empty"),
        ({"irreversible": "yes"}, "True or False"),
        ({"args_schema": {"type": 12}}, "not a JSON Schema"),
        ({"args_schema": ["not", "an", "object"]}, "JSON object"),
        ({"args_schema": {"maximum": 1e300}}, "too large"),
        ({"args_schema": {"description": "x" * 40_000}}, "bytes of JSON"),
        (
            {"args_schema": {"properties": {"a": {"patternProperties": {"^(a+)+$": {}}}}}},
            "patternProperties",
        ),
    ],
)
def test_malformed_hints_are_refused(hints: dict[str, Any], problem: str) -> None:
    with pytest.raises(InvalidApprovalRequest, match=problem):
        ApprovalPolicy(**hints)


def test_an_edit_is_checked_against_the_schema() -> None:
    good = {"amount": 60, "currency": "EUR", "order_id": "A-1"}
    assert edit_problem(REFUND_SCHEMA, good) is None
    assert edit_problem(None, {"amount": "lots"}) is None  # no schema: nothing to check
    assert edit_problem(REFUND_SCHEMA, good | {"amount": "lots"}) == (
        "amount: 'lots' is not of type 'number'"
    )
    problem = edit_problem(REFUND_SCHEMA, {"amount": 1, "currency": "EUR"})
    assert problem == "the arguments: 'order_id' is a required property"


async def test_hints_are_stored_with_the_request_and_read_back(store: ApprovalStore) -> None:
    policy = ApprovalPolicy(
        approvers=frozenset({"group:support-leads"}),
        headline=("amount", "currency"),
        sensitive=frozenset({"card_number"}),
        irreversible=True,
        args_schema=REFUND_SCHEMA,
    )
    asked = await store.request(
        run_id=f"run-{uuid.uuid4().hex}",
        tool="refund",
        args={"amount": 120, "currency": "EUR", "order_id": "A-1"},
        call_id="call-1",
        requested_by="support-agent",
        policy=policy,
    )
    read = await store.get(asked.approval_id)
    assert read.policy == policy
    assert read.policy.args_schema == REFUND_SCHEMA
    document = approval_json(read)
    assert document["policy"]["headline"] == ["amount", "currency"]
    assert document["policy"]["sensitive"] == ["card_number"]
    assert document["policy"]["irreversible"] is True
    assert document["policy_text"] == "one of support-leads"


def test_a_policy_without_hints_is_stored_as_before() -> None:
    assert set(ApprovalPolicy().to_json()) == {
        "tier",
        "allowed",
        "approvers",
        "any_reviewer",
        "quorum",
        "allow_self_approval",
        "expires_in_seconds",
        "description",
    }


async def test_a_stored_schema_is_judged_before_an_edit_not_on_every_read(
    db: Database, store: ApprovalStore
) -> None:
    # Judging a large schema against the metaschema takes a quarter of a second: every read
    # (each row of every page of the inbox) would pay it. A read takes the stored schema as
    # it is, so one written behind the library's back breaks no listing; an edit judges it.
    asked = await store.request(
        run_id=f"run-{uuid.uuid4().hex}",
        tool="refund",
        args={"amount": 120, "currency": "EUR", "order_id": "A-1"},
        call_id="call-1",
        requested_by="support-agent",
        policy=ApprovalPolicy(any_reviewer=True, args_schema=REFUND_SCHEMA),
    )
    planted = "UPDATE approvals SET policy = jsonb_set(policy, '{args_schema}', $2::jsonb)"
    async with db.connection() as conn:  # the owner, behind the journal's back
        await conn.execute(f"{planted} WHERE approval_id = $1", asked.approval_id, '{"type": 12}')
    try:
        read = await store.get(asked.approval_id)
        assert read.policy.args_schema == {"type": 12}
        [listed] = await store.find(run_id=asked.run_id)
        assert listed.approval_id == asked.approval_id
        problem = edit_problem(read.policy.args_schema, {"amount": 60})
        assert problem is not None and problem.startswith("the tool's schema is not a JSON Schema")
    finally:  # the row as its stream says again: the suite's projection checks read it
        async with db.connection() as conn:
            await conn.execute(
                f"{planted} WHERE approval_id = $1",
                asked.approval_id,
                json.dumps(REFUND_SCHEMA),
            )


async def test_a_planted_hint_is_left_out_and_breaks_no_listing(
    db: Database, store: ApprovalStore
) -> None:
    # A worker calling the database's function can store any policy JSON: hints the library
    # would refuse are read as absent, so the other approvals of the page are still listed.
    policy = ApprovalPolicy(any_reviewer=True, headline=("amount",), irreversible=True)
    run_id = f"run-{uuid.uuid4().hex}"
    asked = [
        await store.request(
            run_id=run_id,
            tool="refund",
            args={"amount": n, "currency": "EUR", "order_id": f"A-{n}"},
            call_id=f"call-{n}",
            requested_by="support-agent",
            policy=policy,
        )
        for n in (1, 2)
    ]
    planted = """UPDATE approvals SET policy = policy || $2::jsonb WHERE approval_id = $1"""
    async with db.connection() as conn:  # the owner, behind the journal's back
        await conn.execute(
            planted,
            asked[0].approval_id,
            '{"headline": "amount", "irreversible": "yes", "sensitive": [""]}',
        )
    try:
        listed = await store.find(run_id=run_id)
        assert [a.approval_id for a in listed] == [a.approval_id for a in asked]
        assert (listed[0].policy.headline, listed[0].policy.irreversible) == ((), False)
        assert listed[0].policy.sensitive == frozenset()
        assert listed[1].policy == policy
    finally:  # the row as its stream says again: the suite's projection checks read it
        async with db.connection() as conn:
            await conn.execute(
                planted,
                asked[0].approval_id,
                '{"headline": ["amount"], "irreversible": true}',
            )
            await conn.execute(
                "UPDATE approvals SET policy = policy - 'sensitive' WHERE approval_id = $1",
                asked[0].approval_id,
            )
