"""The adapters' runtime against the real store and ledger: one decide rule (the same decision
again by the same reviewer is a duplicate that records nothing, anything else a
`DecisionConflict`), and one `ask -> wait -> gate -> execute` flow."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

import pytest

from adapters.runtime import (
    DecisionConflict,
    ToolSpec,
    ask,
    await_final,
    decide_once,
    ready,
    require_ready,
    run,
    task_run_id,
)
from approvals import (
    Approval,
    ApprovalExpired,
    ApprovalPending,
    ApprovalPolicy,
    ApprovalStatus,
    ApprovalStore,
    Decision,
    DecisionNotAllowed,
)
from ledger.calls.model import CallContext, CallStatus, Effect, ToolCall, ToolPolicy
from ledger.calls.service import ToolLedger
from ledger.journal import Journal
from ledger.store import Database

DECISIONS = [
    Decision.approve(),
    Decision.reject("over the limit"),
    Decision.edit({"amount": 3}),
    Decision.respond("ask the customer first"),
]
KINDS = ["approve", "reject", "edit", "respond"]
# For each decision above: the same kind with another payload.
OTHER_PAYLOADS = [
    Decision(Decision.approve().kind, reason="looks fine"),
    Decision.reject("fraud"),
    Decision.edit({"amount": 4}),
    Decision.respond("refund half"),
]


def new_run() -> str:
    return f"rt-{uuid.uuid4().hex[:10]}"


def refund_call(run_id: str, call_id: str = "c1") -> ToolCall:
    return ToolCall(run_id, call_id, "refund", {"amount": 9}, turn_id="t1")


async def asked(store: ApprovalStore, policy: ApprovalPolicy | None = None) -> Approval:
    spec = ToolSpec("refund", approval=policy or ApprovalPolicy())
    return await ask(store, spec, refund_call(new_run()), "agent")


async def decided_events(db: Database, approval_id: str) -> int:
    events = await Journal(db).read_stream(f"approval:{approval_id}")
    return sum(e.type == "approval.decided" for e in events)


# -- the decide rule ---------------------------------------------------------------------------


@pytest.mark.parametrize("decision", DECISIONS, ids=KINDS)
async def test_the_same_decision_by_the_same_reviewer_again_is_a_duplicate_that_records_nothing(
    store: ApprovalStore, db: Database, decision: Decision
) -> None:
    approval = await asked(store)
    first = await decide_once(store, approval.approval_id, decision, "alice")
    again = await decide_once(store, approval.approval_id, decision, "alice")
    assert (first.duplicate, again.duplicate) == (False, True)
    assert first.approval.status is again.approval.status and again.approval.status.final
    assert await decided_events(db, approval.approval_id) == 1


@pytest.mark.parametrize("decision", DECISIONS, ids=KINDS)
async def test_the_same_decision_by_another_reviewer_is_a_conflict(
    store: ApprovalStore, db: Database, decision: Decision
) -> None:
    approval = await asked(store)
    await decide_once(store, approval.approval_id, decision, "alice")
    with pytest.raises(DecisionConflict) as caught:
        await decide_once(store, approval.approval_id, decision, "bob")
    assert (caught.value.approval_id, caught.value.attempted) == (
        approval.approval_id,
        decision.kind,
    )
    assert await decided_events(db, approval.approval_id) == 1


@pytest.mark.parametrize(
    ("decision", "other"), list(zip(DECISIONS, OTHER_PAYLOADS, strict=True)), ids=KINDS
)
async def test_the_same_kind_with_another_payload_is_a_conflict(
    store: ApprovalStore, db: Database, decision: Decision, other: Decision
) -> None:
    approval = await asked(store)
    await decide_once(store, approval.approval_id, decision, "alice")
    with pytest.raises(DecisionConflict, match=f"already {decision.kind.value}"):
        await decide_once(store, approval.approval_id, other, "alice")
    stored = await store.get(approval.approval_id, reveal=True)
    assert stored.decision == (Decision.approve() if decision.kind.value == "approve" else decision)
    assert await decided_events(db, approval.approval_id) == 1


async def test_another_kind_by_the_same_reviewer_is_a_conflict(store: ApprovalStore) -> None:
    approval = await asked(store)
    await decide_once(store, approval.approval_id, Decision.approve(), "alice")
    with pytest.raises(DecisionConflict) as caught:
        await decide_once(store, approval.approval_id, Decision.reject("no"), "alice")
    assert (caught.value.recorded, caught.value.attempted) == ("approved", "reject")


async def test_a_repeated_quorum_vote_is_a_duplicate_and_the_quorum_stays_open(
    store: ApprovalStore, db: Database
) -> None:
    approval = await asked(store, ApprovalPolicy(quorum=2, any_reviewer=True))
    first = await decide_once(store, approval.approval_id, Decision.approve(), "alice")
    again = await decide_once(store, approval.approval_id, Decision.approve(), "alice")
    assert (first.approval.status, again.approval.status) == (ApprovalStatus.PENDING,) * 2
    assert again.duplicate
    done = await decide_once(store, approval.approval_id, Decision.approve(), "bob")
    assert (done.duplicate, done.approval.status) == (False, ApprovalStatus.APPROVED)
    assert await decided_events(db, approval.approval_id) == 2


async def test_a_refusal_by_the_policy_is_no_duplicate(store: ApprovalStore) -> None:
    approval = await asked(store, ApprovalPolicy(approvers=frozenset({"bob"})))
    for _ in range(2):
        with pytest.raises(DecisionNotAllowed, match="not an approver"):
            await decide_once(store, approval.approval_id, Decision.approve(), "alice")
    with pytest.raises(DecisionNotAllowed, match="may not decide"):
        await decide_once(store, approval.approval_id, Decision.approve(), "agent")


async def test_an_expired_approval_takes_no_decision_not_even_a_repeated_vote(
    store: ApprovalStore,
) -> None:
    policy = ApprovalPolicy(quorum=2, any_reviewer=True, expires_in=timedelta(seconds=0.3))
    approval = await asked(store, policy)
    await decide_once(store, approval.approval_id, Decision.approve(), "alice")
    await asyncio.sleep(0.4)  # what is tested: the expiry passes by the server's clock
    with pytest.raises(ApprovalExpired):
        await decide_once(store, approval.approval_id, Decision.approve(), "alice")
    with pytest.raises(DecisionConflict, match="already expired"):
        await decide_once(store, approval.approval_id, Decision.approve(), "alice")


async def test_a_cancelled_approval_is_a_conflict(store: ApprovalStore) -> None:
    approval = await asked(store)
    await store.cancel(approval.approval_id, "agent")
    with pytest.raises(DecisionConflict, match="already cancelled"):
        await decide_once(store, approval.approval_id, Decision.approve(), "alice")


# -- the flow ----------------------------------------------------------------------------------


def test_a_spec_gives_the_ledger_its_own_policy() -> None:
    assert ToolSpec("x").ledger_policy() == ToolPolicy(Effect.SINGLE_ATTEMPT, False)
    once = ToolSpec("x", Effect.IDEMPOTENT_WRITE, once_per_run=True)
    assert once.ledger_policy() == ToolPolicy(Effect.IDEMPOTENT_WRITE, True)
    assert task_run_id("run-7", "call-3") == "run-7/call-3"


async def test_ask_twice_is_one_approval_and_a_spec_without_policy_asks_nothing(
    store: ApprovalStore,
) -> None:
    spec, call = ToolSpec("refund", approval=ApprovalPolicy()), refund_call(new_run())
    first = await ask(store, spec, call, "agent")
    assert (await ask(store, spec, call, "agent")).approval_id == first.approval_id
    with pytest.raises(ValueError, match="needs no approval"):
        await ask(store, ToolSpec("refund"), call, "agent")


async def test_ask_wait_gate_execute_runs_the_tool_once_with_its_approval_consumed(
    store: ApprovalStore, ledger: ToolLedger
) -> None:
    ran: list[dict[str, Any]] = []

    async def refund(args: dict[str, Any], context: CallContext) -> str:
        ran.append(args)
        return "refunded"

    spec = ToolSpec("refund", approval=ApprovalPolicy())
    call = refund_call(new_run())
    approval = await ask(store, spec, call, "agent")
    assert not ready(approval)
    with pytest.raises(ApprovalPending):
        require_ready(approval)
    with pytest.raises(ApprovalPending):  # the gate refuses too: nothing runs
        await run(ledger, store, spec, call, refund, approval.approval_id)

    waiting = asyncio.ensure_future(await_final(store, approval.approval_id, 30))
    await asyncio.sleep(0.1)  # lets the wait start first (it must end decided either way)
    await decide_once(store, approval.approval_id, Decision.edit({"amount": 2}), "alice")
    final = await waiting
    assert ready(final) and final.status is ApprovalStatus.EDITED

    outcome = await run(ledger, store, spec, call, refund, final.approval_id)
    again = await run(ledger, store, spec, call, refund, final.approval_id)
    assert (outcome.status, again.status, again.replayed) == (
        CallStatus.SUCCEEDED,
        CallStatus.SUCCEEDED,
        True,
    )
    assert ran == [{"amount": 2}]
    consumed = await store.get(approval.approval_id)
    assert consumed.consumed_by == task_run_id(call.run_id, call.call_id)


async def test_an_expired_request_is_ready_and_runs_as_a_denial(
    store: ApprovalStore, ledger: ToolLedger
) -> None:
    async def refund(args: dict[str, Any], context: CallContext) -> str:
        raise AssertionError("a denied call never runs")

    spec = ToolSpec("refund", approval=ApprovalPolicy(expires_in=timedelta(seconds=0.2)))
    call = refund_call(new_run())
    approval = await ask(store, spec, call, "agent")
    await asyncio.sleep(0.3)  # what is tested: the expiry passes by the server's clock
    assert ready(approval) and approval.status is ApprovalStatus.PENDING
    outcome = await run(ledger, store, spec, call, refund, approval.approval_id)
    assert outcome.status is CallStatus.DENIED
