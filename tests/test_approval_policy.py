"""One approval policy: every case is judged alike by the pure rule, by the store when a
reviewer decides (real database), and by `ledger verify`'s check of a stream holding that
decision signed by the reviewer side. The two tiers: a self-confirmation decides only the
self-confirm tier, and a policy that names no approvers admits only reviewers the directory
lists."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from approvals import (
    ApprovalExpired,
    ApprovalPolicy,
    ApprovalStore,
    ApprovalTier,
    Decision,
    DecisionKind,
    DecisionNotAllowed,
    InvalidApprovalRequest,
    Reviewer,
    ReviewerDirectory,
    SelfConfirmation,
)
from approvals.integrity import ProblemKind, approval_problems, as_facts, sign_review
from approvals.model import Review
from approvals.policy import PolicyRule, policy_problem
from ledger.journal import Journal
from ledger.journal.projection import Fact
from ledger.keys import KeyRing
from ledger.store import Database

APPROVE, REJECT, EDIT = DecisionKind.APPROVE, DecisionKind.REJECT, DecisionKind.EDIT


@dataclass(frozen=True)
class Case:
    policy: ApprovalPolicy
    kind: DecisionKind
    reviewer: str
    refused: PolicyRule | None
    requested_by: str = "agent"
    earlier: tuple[str, ...] = ()  # who approved before
    expired: bool = False


QUORUM_2 = ApprovalPolicy(quorum=2, any_reviewer=True)
LISTED = ("m1", "m2", "agent")  # in the session database's reviewer directory
CASES = {
    "a listed reviewer approves a self-confirm approval": Case(
        ApprovalPolicy(), APPROVE, "m1", None
    ),
    "a listed reviewer approves where any reviewer may": Case(
        ApprovalPolicy(any_reviewer=True), APPROVE, "m2", None
    ),
    "a decision the policy does not allow": Case(
        ApprovalPolicy(allowed=frozenset({APPROVE, REJECT})), EDIT, "m1", PolicyRule.KIND
    ),
    "the requester approves its own request": Case(
        ApprovalPolicy(), APPROVE, "agent", PolicyRule.SELF_APPROVAL
    ),
    # The requester is recorded as given; NFKC makes the fullwidth spelling the reviewer
    # `agent`. Verification compared the raw ids and let this through.
    "the requester approves under another spelling": Case(
        ApprovalPolicy(), APPROVE, "agent", PolicyRule.SELF_APPROVAL, requested_by="\uff41gent"
    ),
    "self-approval where the policy allows it": Case(
        ApprovalPolicy(allow_self_approval=True), APPROVE, "agent", None
    ),
    "a reviewer the approvers do not name": Case(
        ApprovalPolicy(approvers=frozenset({"m1"})), APPROVE, "m2", PolicyRule.APPROVER
    ),
    "an approver named in another spelling": Case(
        ApprovalPolicy(approvers=frozenset({"\uff4d\uff11"})), APPROVE, "m1", None
    ),
    "an edit where a quorum must approve": Case(QUORUM_2, EDIT, "m1", PolicyRule.QUORUM_KIND),
    "one reviewer approving twice": Case(
        QUORUM_2, APPROVE, "m1", PolicyRule.TWICE, earlier=("m1",)
    ),
    "a second distinct approver": Case(QUORUM_2, APPROVE, "m2", None, earlier=("m1",)),
    "an approver rejecting after its approval": Case(QUORUM_2, REJECT, "m1", None, earlier=("m1",)),
    "a decision after the request expired": Case(
        ApprovalPolicy(expires_in=timedelta(microseconds=1)),
        APPROVE,
        "m1",
        PolicyRule.EXPIRED,
        expired=True,
    ),
}


def _decision(kind: DecisionKind) -> Decision:
    return Decision.edit({"amount": 1}) if kind is EDIT else Decision(kind)


def test_the_pure_rule_judges_every_case() -> None:
    now = datetime.now(UTC)
    for name, case in CASES.items():
        expires_at = now - timedelta(seconds=1) if case.expired else now + timedelta(hours=1)
        refusal = policy_problem(
            case.policy,
            case.kind,
            Reviewer(case.reviewer, listed=True),
            earlier_approvers=case.earlier,
            requested_by=case.requested_by,
            at=now,
            expires_at=expires_at,
        )
        assert (None if refusal is None else refusal.rule) == case.refused, name


@pytest.mark.parametrize("name", list(CASES))
async def test_the_store_and_verify_judge_like_the_rule(
    name: str, store: ApprovalStore, ring: KeyRing, db: Database
) -> None:
    case = CASES[name]
    for listed in LISTED:
        await ReviewerDirectory(db).add(listed, by="test")
    approval = await store.request(
        run_id=f"run-{uuid.uuid4().hex[:8]}",
        tool="refund",
        args={"amount": 120},
        call_id="c1",
        requested_by=case.requested_by,
        policy=case.policy,
    )
    aid = approval.approval_id
    for earlier in case.earlier:
        await store.decide(aid, Decision.approve(), earlier)
    stream = as_facts(await Journal(db).read_stream(f"approval:{aid}"))
    at = datetime.now(UTC)
    refusal = policy_problem(
        case.policy,
        case.kind,
        Reviewer(case.reviewer, listed=True),
        earlier_approvers=case.earlier,
        requested_by=case.requested_by,
        at=at,
        expires_at=approval.expires_at,
    )
    assert (None if refusal is None else refusal.rule) == case.refused

    # The store, deciding.
    if case.refused is None:
        await store.decide(aid, _decision(case.kind), case.reviewer)
    elif case.refused is PolicyRule.EXPIRED:
        with pytest.raises(ApprovalExpired):
            await store.decide(aid, _decision(case.kind), case.reviewer)
    else:
        assert refusal is not None
        with pytest.raises(DecisionNotAllowed) as refused:
            await store.decide(aid, _decision(case.kind), case.reviewer)
        assert refusal.message in str(refused.value)

    # Verification, of the stream as it stood with this decision signed and appended.
    rid = Reviewer(case.reviewer).id
    review = sign_review(ring, approval.binding, aid, Review(rid, case.kind, at))
    approvers = {*case.earlier, rid}
    final = case.kind is not APPROVE or len(approvers) >= case.policy.quorum
    data = review.to_json() | {"final": final}
    if final:
        data["decided_by"] = sorted(approvers) if case.kind is APPROVE else [rid]
    decided = Fact(stream[0].stream_id, stream[-1].version + 1, "approval.decided", data, rid)
    problems = await approval_problems(ring, [*stream, decided])
    if refusal is None:
        assert problems == []
    else:
        assert [(p.kind, p.message) for p in problems] == [(ProblemKind.POLICY, refusal.message)]


# -- the tiers ------------------------------------------------------------------------------------

ME = SelfConfirmation("signoff_worker", "agent-host", 4242)


def _judge(policy: ApprovalPolicy, kind: DecisionKind, who: Reviewer | SelfConfirmation) -> Any:
    now = datetime.now(UTC)
    refusal = policy_problem(
        policy,
        kind,
        who,
        earlier_approvers=(),
        requested_by="agent",
        at=now,
        expires_at=now + timedelta(hours=1),
    )
    return None if refusal is None else refusal.rule


def test_the_default_policy_is_the_self_confirm_tier_and_any_reviewer_is_said_explicitly() -> None:
    assert ApprovalPolicy().tier is ApprovalTier.SELF_CONFIRM
    assert ApprovalPolicy(approvers=frozenset({"alice"})).tier is ApprovalTier.FOUR_EYES
    assert ApprovalPolicy(approvers=frozenset({"group:leads"})).tier is ApprovalTier.FOUR_EYES
    assert ApprovalPolicy(any_reviewer=True).tier is ApprovalTier.FOUR_EYES
    # The stored policy says its tier, and a policy whose JSON says another is refused.
    stored = ApprovalPolicy(any_reviewer=True).to_json()
    assert stored["tier"] == "four_eyes" and stored["any_reviewer"] is True
    assert ApprovalPolicy().to_json()["tier"] == "self_confirm"
    assert ApprovalPolicy.from_json(stored) == ApprovalPolicy(any_reviewer=True)
    with pytest.raises(InvalidApprovalRequest, match="tier"):
        ApprovalPolicy.from_json({**stored, "tier": "self_confirm"})
    with pytest.raises(InvalidApprovalRequest, match="give one"):
        ApprovalPolicy(approvers=frozenset({"alice"}), any_reviewer=True)
    with pytest.raises(InvalidApprovalRequest, match="needs reviewers"):
        ApprovalPolicy(quorum=2)


def test_a_self_confirmation_decides_the_self_confirm_tier_only() -> None:
    assert _judge(ApprovalPolicy(), APPROVE, ME) is None
    assert _judge(ApprovalPolicy(), EDIT, ME) is None
    narrow = ApprovalPolicy(allowed=frozenset({APPROVE, REJECT}))
    assert _judge(narrow, EDIT, ME) is PolicyRule.KIND
    assert _judge(ApprovalPolicy(approvers=frozenset({"alice"})), APPROVE, ME) is PolicyRule.TIER
    assert _judge(ApprovalPolicy(any_reviewer=True), REJECT, ME) is PolicyRule.TIER
    assert ME.name == "self-confirmed by signoff_worker"
    with pytest.raises(InvalidApprovalRequest):  # no reviewer id can be a self-confirmation
        Reviewer(ME.name)


def test_a_policy_naming_nobody_admits_only_reviewers_the_directory_lists() -> None:
    for policy in (ApprovalPolicy(), ApprovalPolicy(any_reviewer=True)):
        assert _judge(policy, APPROVE, Reviewer("carol")) is PolicyRule.DIRECTORY
        assert _judge(policy, APPROVE, Reviewer("carol", listed=True)) is None
    # Named approvers are the policy's own list: the directory is not asked.
    assert (
        _judge(ApprovalPolicy(approvers=frozenset({"carol"})), APPROVE, Reviewer("carol")) is None
    )


async def test_the_store_refuses_a_reviewer_the_directory_does_not_list(
    store: ApprovalStore,
) -> None:
    for policy in (ApprovalPolicy(), ApprovalPolicy(any_reviewer=True)):
        approval = await store.request(
            run_id=f"run-{uuid.uuid4().hex[:8]}",
            tool="refund",
            args={"amount": 120},
            call_id="c1",
            requested_by="agent",
            policy=policy,
        )
        unlisted = f"nobody-{uuid.uuid4().hex[:8]}"
        with pytest.raises(DecisionNotAllowed, match="not in the reviewer directory"):
            await store.decide(approval.approval_id, Decision.approve(), unlisted)
        assert (await store.get(approval.approval_id)).reviews == ()
