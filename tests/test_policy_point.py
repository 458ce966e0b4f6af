"""The policy decision point with real Cedar policies: three outcomes, history, time, log-only
mode, fail-closed errors, and what is recorded with the calls it judged."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest

from adapters.runtime import ToolSpec, ask, governed, judge, run
from approvals import ApprovalPolicy, Decision, DecisionKind
from approvals.checks import verify_all
from approvals.policies import (
    InvalidPolicySet,
    Mode,
    Outcome,
    PolicyConflict,
    PolicyNotPermitted,
    PolicyPoint,
    PolicySets,
    Principal,
)
from approvals.policies.cedar import parse_rules
from ledger.audit.queries import call_story, story_summary
from ledger.calls import CallContext, CallStatus, Effect, Judgment, ToolCall, ToolLedger
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.logins import temporary_login
from ledger.store.settings import Settings
from tests.support.policies import ADMIN, PolicyWorld, policy_world
from tests.support.processes import TEST_KEK

REFUND_TIERS = """
@id("refund-small")
permit(principal, action == Action::"refund", resource)
when { context.input.amount <= 50 };

@id("refund-lead")
@approval("Refunds over 50 need a support lead")
@approvers("group:support-lead")
permit(principal, action == Action::"refund", resource)
when { context.input.amount > 50 && context.input.amount <= 500 };

@id("refund-cap")
@reason("refunds above 500 are refused")
forbid(principal, action == Action::"refund", resource)
when { context.input.amount > 500 };

@id("reads")
permit(principal, action in Action::"effect:read", resource);
"""

REFUND = ToolSpec("refund", Effect.SINGLE_ATTEMPT)


@pytest.fixture
async def world(server_url: str) -> AsyncIterator[PolicyWorld]:
    async with policy_world(server_url) as w:
        yield w


def call(tool: str = "refund", run_id: str | None = None, **args: Any) -> ToolCall:
    return ToolCall(
        run_id or f"run-{uuid.uuid4().hex[:8]}", f"c-{uuid.uuid4().hex[:8]}", tool, args
    )


async def ran(args: dict[str, Any], context: CallContext) -> str:
    return f"refunded {args['amount']}"


async def test_refund_tiers_allow_ask_and_refuse(world: PolicyWorld) -> None:
    published = await world.sets.publish(REFUND_TIERS, by=ADMIN)
    assert published.version == 1
    assert published.policy_ids == ("refund-small", "refund-lead", "refund-cap", "reads")

    small = await judge(world.point, REFUND, call(amount=20), "agent-7")
    assert small.outcome is Outcome.ALLOW
    assert small.stamp is not None and small.stamp.policies == ("refund-small",)

    middle = await judge(world.point, REFUND, call(amount=80), "agent-7")
    assert middle.outcome is Outcome.APPROVAL
    assert middle.approval is not None
    assert middle.approval.approvers == frozenset({"group:support-lead"})
    assert middle.approval.description == "Refunds over 50 need a support lead"
    assert governed(REFUND, middle).approval == middle.approval

    large = await judge(world.point, REFUND, call(amount=900), "agent-7")
    assert large.outcome is Outcome.DENY
    assert large.reason == "refunds above 500 are refused"
    assert large.stamp is not None and large.stamp.policies == ("refund-cap",)
    assert large.stamp.set_hash == published.set_hash


async def test_a_denied_call_never_runs_and_its_stamp_is_recorded(world: PolicyWorld) -> None:
    await world.sets.publish(REFUND_TIERS, by=ADMIN)
    refused = call(amount=900)
    verdict = await judge(world.point, REFUND, refused, "agent-7")
    ran_here: list[int] = []

    async def tool(args: dict[str, Any], context: CallContext) -> None:
        ran_here.append(1)

    outcome = await run(world.ledger, world.store, REFUND, refused, tool, verdict=verdict)
    assert outcome.status is CallStatus.DENIED
    assert outcome.error == "refunds above 500 are refused"
    assert ran_here == []
    started = await first_event(world, refused)
    assert started["policy_decision"]["outcome"] == "deny"
    assert started["policy_decision"]["policies"] == ["refund-cap"]
    story = story_summary(await call_story(world.db, refused.run_id, refused.call_id))
    assert story["policy_decision"]["reason"] == "refunds above 500 are refused"
    report = await verify_all(world.db)
    assert report.ok, report.problems


async def first_event(world: PolicyWorld, c: ToolCall) -> dict[str, Any]:
    async with world.db.connection() as conn:
        text = await conn.fetchval(
            "SELECT data::text FROM events WHERE stream_id = $1 AND version = 1",
            f"call:{c.run_id}/{c.call_id}",
        )
    data: dict[str, Any] = json.loads(text)
    return data


async def test_an_approval_required_by_policy_is_asked_decided_and_consumed(
    world: PolicyWorld,
) -> None:
    await world.sets.publish(REFUND_TIERS, by=ADMIN)
    asked = call(amount=80)
    verdict = await judge(world.point, REFUND, asked, "agent-7")
    spec = governed(REFUND, verdict)
    approval = await ask(world.store, spec, asked, "agent-7", verdict=verdict)
    async with world.db.connection() as conn:
        requested = json.loads(
            await conn.fetchval(
                "SELECT data::text FROM events WHERE stream_id = $1 AND version = 1",
                f"approval:{approval.approval_id}",
            )
        )
    assert requested["policy_decision"]["outcome"] == "approval"
    assert requested["policy_decision"]["policies"] == ["refund-lead"]
    await world.store.decide(
        approval.approval_id,
        Decision(DecisionKind.APPROVE),
        "alice",
    )
    again = await judge(world.point, REFUND, asked, "agent-7")
    outcome = await run(
        world.ledger, world.store, spec, asked, ran, approval.approval_id, verdict=again
    )
    assert outcome.status is CallStatus.SUCCEEDED
    started = await first_event(world, asked)
    assert started["approval_id"] == approval.approval_id
    assert started["policy_decision"]["outcome"] == "approval"
    assert (await verify_all(world.db)).ok


async def test_a_forbid_overrides_a_permit(world: PolicyWorld) -> None:
    await world.sets.publish(
        """
        @id("everyone") permit(principal, action, resource);
        @id("no-prod") forbid(principal, action == Action::"deploy", resource)
        when { context.input.env == "prod" };
        """,
        by=ADMIN,
    )
    deploy = ToolSpec("deploy", Effect.IDEMPOTENT_WRITE)
    staging = await judge(world.point, deploy, call("deploy", env="staging"), "agent-7")
    prod = await judge(world.point, deploy, call("deploy", env="prod"), "agent-7")
    assert staging.outcome is Outcome.ALLOW
    assert prod.outcome is Outcome.DENY
    assert prod.stamp is not None and prod.stamp.policies == ("no-prod",)


async def test_nothing_permits_means_deny(world: PolicyWorld) -> None:
    await world.sets.publish(REFUND_TIERS, by=ADMIN)
    deploy_spec = ToolSpec("deploy", Effect.IDEMPOTENT_WRITE)
    deploy = await judge(world.point, deploy_spec, call("deploy", env="x"), "agent-7")
    assert deploy.outcome is Outcome.DENY
    assert deploy.reason == "no policy permits this call"
    unknown = await judge(world.point, ToolSpec("wire"), call("wire", amount=1), "agent-7")
    assert unknown.outcome is Outcome.DENY
    assert "was not registered" in unknown.reason


async def test_without_a_set_the_tools_own_rule_decides_and_nothing_is_recorded(
    world: PolicyWorld,
) -> None:
    asks = ToolSpec("refund", approval=ApprovalPolicy())
    verdict = await judge(world.point, asks, call(amount=10), "agent-7")
    assert verdict.outcome is Outcome.APPROVAL and verdict.stamp is None
    plain = await judge(world.point, REFUND, call(amount=10), "agent-7")
    assert plain.outcome is Outcome.ALLOW and plain.judgment is None
    await world.sets.publish("", by=ADMIN, mode=Mode.OFF)
    off = await judge(world.point, REFUND, call(amount=900), "agent-7")
    assert off.outcome is Outcome.ALLOW and off.stamp is None


async def test_log_only_records_what_the_set_would_decide(world: PolicyWorld) -> None:
    await world.sets.publish(REFUND_TIERS, by=ADMIN, mode=Mode.LOG_ONLY)
    large = call(amount=900)
    verdict = await judge(world.point, REFUND, large, "agent-7")
    assert verdict.outcome is Outcome.ALLOW  # the tool's own rule: no approval
    assert verdict.stamp is not None
    assert verdict.stamp.mode is Mode.LOG_ONLY and verdict.stamp.outcome is Outcome.DENY
    outcome = await run(world.ledger, world.store, REFUND, large, ran, verdict=verdict)
    assert outcome.status is CallStatus.SUCCEEDED
    started = await first_event(world, large)
    assert started["policy_decision"]["mode"] == "log_only"
    assert started["policy_decision"]["outcome"] == "deny"
    assert (await verify_all(world.db)).ok


RUN_LIMIT = """
@id("three-per-run")
permit(principal, action == Action::"refund", resource)
when {
    context.history.refund.calls < 3 &&
    context.history.refund.sums.amount + context.input.amount <= 100
};
"""


async def test_a_count_per_run_holds_under_concurrent_calls(world: PolicyWorld) -> None:
    await world.sets.publish(RUN_LIMIT, by=ADMIN)
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    points = [PolicyPoint(world.sets) for _ in range(6)]

    async def one(point: PolicyPoint, n: int) -> CallStatus:
        c = ToolCall(run_id, f"c{n}", "refund", {"amount": 10})
        spec = REFUND

        async def again(judged: ToolCall) -> Any:
            return await judge(point, spec, judged, "agent-7")

        verdict = await again(c)
        outcome = await run(
            world.ledger, world.store, spec, c, ran, verdict=verdict, judge_again=again
        )
        return outcome.status

    try:
        statuses = await asyncio.gather(*(one(p, n) for n, p in enumerate(points)))
    finally:
        for p in points:
            await p.close()
    assert sorted(statuses) == sorted([CallStatus.SUCCEEDED] * 3 + [CallStatus.DENIED] * 3)
    fourth = await judge(world.point, REFUND, call(run_id=run_id, amount=1), "agent-7")
    assert fourth.outcome is Outcome.DENY
    other_run = await judge(world.point, REFUND, call(amount=60), "agent-7")
    assert other_run.outcome is Outcome.ALLOW


async def test_a_sum_per_run(world: PolicyWorld) -> None:
    await world.sets.publish(RUN_LIMIT, by=ADMIN)
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    first = call(run_id=run_id, amount=70)
    verdict = await judge(world.point, REFUND, first, "agent-7")
    await run(world.ledger, world.store, REFUND, first, ran, verdict=verdict)
    over = await judge(world.point, REFUND, call(run_id=run_id, amount=40), "agent-7")
    assert over.outcome is Outcome.DENY
    under = await judge(world.point, REFUND, call(run_id=run_id, amount=30), "agent-7")
    assert under.outcome is Outcome.ALLOW


WEEKDAY_DEPLOYS = """
@id("deploy-weekdays")
@approval("Production deploys need two approvers")
@approvers("alice, bob")
@quorum("2")
permit(principal, action == Action::"deploy", resource)
when { context.now.weekday <= 5 };

@id("no-night-deploys")
@reason("no deploys between 22:00 and 06:00")
forbid(principal, action == Action::"deploy", resource)
when { context.now.hour >= 22 || context.now.hour < 6 };
"""


@pytest.mark.parametrize(
    ("moment", "outcome"),
    [
        (datetime(2026, 12, 2, 10, 0, tzinfo=UTC), Outcome.APPROVAL),  # Wednesday 11:00 Berlin
        (datetime(2026, 12, 2, 22, 30, tzinfo=UTC), Outcome.DENY),  # Wednesday 23:30 Berlin
        (datetime(2026, 12, 5, 10, 0, tzinfo=UTC), Outcome.DENY),  # Saturday: nothing permits
    ],
)
async def test_two_approvers_on_weekdays_and_no_deploys_at_night(
    world: PolicyWorld, moment: datetime, outcome: Outcome
) -> None:
    await world.sets.publish(WEEKDAY_DEPLOYS, by=ADMIN, timezone="Europe/Berlin")
    point = PolicyPoint(world.sets, clock=lambda: moment)
    try:
        deploy = ToolSpec("deploy", Effect.IDEMPOTENT_WRITE)
        verdict = await judge(point, deploy, call("deploy", env="prod"), "agent-7")
    finally:
        await point.close()
    assert verdict.outcome is outcome
    if outcome is Outcome.APPROVAL:
        assert verdict.approval is not None
        assert verdict.approval.quorum == 2
        assert verdict.approval.approvers == frozenset({"alice", "bob"})


async def test_groups_of_the_principal(world: PolicyWorld) -> None:
    await world.sets.publish(
        '@id("support-agents") permit(principal in Group::"support", action, resource);',
        by=ADMIN,
    )
    inside = Principal("agent-7", frozenset({"support"}))
    assert (await judge(world.point, REFUND, call(amount=1), inside)).outcome is Outcome.ALLOW
    assert (await judge(world.point, REFUND, call(amount=1), "agent-8")).outcome is Outcome.DENY


async def test_an_invalid_set_is_refused_with_cedars_diagnostics(world: PolicyWorld) -> None:
    await world.sets.publish(REFUND_TIERS, by=ADMIN)
    with pytest.raises(InvalidPolicySet) as refused:
        await world.sets.publish(
            '@id("typo") permit(principal, action == Action::"refund", resource) '
            "when { context.input.amout > 1 };",
            by=ADMIN,
        )
    assert any("typo" in p and "amout" in p for p in refused.value.problems)
    with pytest.raises(InvalidPolicySet, match="no @id"):
        await world.sets.publish("permit(principal, action, resource);", by=ADMIN)
    with pytest.raises(InvalidPolicySet, match="unexpected"):
        await world.sets.publish("permit(principal,", by=ADMIN)
    with pytest.raises(InvalidPolicySet, match="quorum"):
        await world.sets.publish(
            '@id("q") @approval @quorum("two") permit(principal, action, resource);', by=ADMIN
        )
    assert await world.sets.head() == 1  # nothing changed


async def test_only_policy_administrators_publish(world: PolicyWorld) -> None:
    with pytest.raises(PolicyNotPermitted):
        await world.sets.publish(REFUND_TIERS, by="alice")
    assert await world.sets.head() == 0


async def test_concurrent_publishes_take_turns(world: PolicyWorld) -> None:
    texts = [f'@id("p{n}") permit(principal, action, resource);' for n in range(8)]
    published = await asyncio.gather(*(world.sets.publish(t, by=ADMIN) for t in texts))
    assert sorted(p.version for p in published) == list(range(1, 9))
    with pytest.raises(PolicyConflict):
        await world.sets.publish(texts[0], by=ADMIN, expect_version=3)
    racing = await asyncio.gather(
        *(world.sets.publish(t, by=ADMIN, expect_version=8) for t in texts[:3]),
        return_exceptions=True,
    )
    assert sum(1 for r in racing if isinstance(r, PolicyConflict)) == 2
    assert await world.sets.head() == 9
    assert await world.sets.verify_projection() == []
    assert (await verify_all(world.db)).ok


async def test_an_evaluation_error_denies(world: PolicyWorld) -> None:
    await world.sets.publish(
        """
        @id("all") permit(principal, action, resource);
        @id("overflow") forbid(principal, action == Action::"refund", resource)
        when { context.input.amount * 9223372036854775807 < 0 };
        """,
        by=ADMIN,
    )
    verdict = await judge(world.point, REFUND, call(amount=2), "agent-7")
    assert verdict.outcome is Outcome.DENY
    assert "could not be evaluated" in verdict.reason and "overflow" in verdict.reason
    mistyped = await judge(world.point, REFUND, call(amount="ten"), "agent-7")
    assert mistyped.outcome is Outcome.DENY and "integer" in mistyped.reason


async def test_a_timeout_denies(world: PolicyWorld) -> None:
    await world.sets.publish(RUN_LIMIT, by=ADMIN)
    point = PolicyPoint(world.sets, timeout=0.5)
    blocker = await asyncpg.connect(world.url)
    try:
        tx = blocker.transaction()
        await tx.start()
        await blocker.execute("LOCK TABLE call_tallies IN ACCESS EXCLUSIVE MODE")
        verdict = await judge(point, REFUND, call(amount=1), "agent-7")
        await tx.rollback()
    finally:
        await blocker.close()
        await point.close()
    assert verdict.outcome is Outcome.DENY
    assert "not evaluated within 0.5 s" in verdict.reason


async def test_an_unreadable_set_denies(world: PolicyWorld) -> None:
    published = await world.sets.publish(REFUND_TIERS, by=ADMIN)
    async with world.db.connection() as conn:  # the owner edits the row behind the journal
        await conn.execute(
            "UPDATE policy_sets SET policies = replace(policies, '<= 50', '<= 5000')"
        )
    fresh = PolicyPoint(PolicySets(world.db, world.ring))  # loads the set anew
    try:
        verdict = await judge(fresh, REFUND, call(amount=900), "agent-7")
    finally:
        await fresh.close()
    assert verdict.outcome is Outcome.DENY
    assert f"version {published.version} is unreadable" in verdict.reason
    assert verdict.stamp is not None and verdict.stamp.version == 0  # no set could judge it
    report = await verify_all(world.db)
    assert any("policy_sets" in p for p in report.problems)


FORBID_LARGE = """
@id("refund-any") permit(principal, action == Action::"refund", resource)
when { context.input.amount <= 50 };
@id("refund-freeze") @reason("refunds over 50 are frozen")
forbid(principal, action == Action::"refund", resource) when { context.input.amount > 50 };
"""

ALLOW_ALL_REFUNDS = '@id("refund-any") permit(principal, action == Action::"refund", resource);'


@pytest.mark.parametrize(
    ("second", "status"), [(FORBID_LARGE, "denied"), (ALLOW_ALL_REFUNDS, "ran")]
)
async def test_a_set_published_between_the_request_and_the_decision(
    world: PolicyWorld, second: str, status: str
) -> None:
    """The request keeps the version it was judged under (and its approval policy: the
    decision is judged by it); the resumed call is judged again by the active set: a denial
    wins over the approval, an outright allow runs it with the decision already made."""
    first = await world.sets.publish(REFUND_TIERS, by=ADMIN)
    asked = call(amount=80)
    verdict = await judge(world.point, REFUND, asked, "agent-7")
    approval = await ask(world.store, governed(REFUND, verdict), asked, "agent-7", verdict=verdict)
    await world.sets.publish(second, by=ADMIN)
    decided = await world.store.decide(
        approval.approval_id, Decision(DecisionKind.APPROVE), "alice"
    )
    assert decided.policy.approvers == frozenset({"group:support-lead"})  # v1's policy
    again = await judge(world.point, REFUND, asked, "agent-7")
    assert again.stamp is not None and again.stamp.version == 2
    outcome = await run(
        world.ledger, world.store, governed(REFUND, again), asked, ran, approval.approval_id,
        verdict=again,
    )  # fmt: skip
    requested = await first_approval_event(world, approval.approval_id)
    assert requested["policy_decision"]["version"] == first.version
    after = await world.store.get(approval.approval_id)
    if status == "denied":
        assert after.consumed_by is None  # a denial does not use the approval
        assert outcome.status is CallStatus.DENIED
        assert outcome.error == "refunds over 50 are frozen"
    else:
        assert outcome.status is CallStatus.SUCCEEDED
        assert after.consumed_by == f"{asked.run_id}/{asked.call_id}"  # the decision was made
    assert (await verify_all(world.db)).ok


async def first_approval_event(world: PolicyWorld, approval_id: str) -> dict[str, Any]:
    async with world.db.connection() as conn:
        text = await conn.fetchval(
            "SELECT data::text FROM events WHERE stream_id = $1 AND version = 1",
            f"approval:{approval_id}",
        )
    data: dict[str, Any] = json.loads(text)
    return data


async def test_a_worker_login_cannot_name_a_set_that_was_never_published(
    world: PolicyWorld,
) -> None:
    """What a stolen worker login can write of a call's policy decision, and what verify says:
    a stamp naming an unpublished version, or a denial that ran, are both findings."""
    await world.sets.publish(REFUND_TIERS, by=ADMIN)
    async with temporary_login(world.url, "signoff_app") as url:
        settings = Settings(database_url=url, kek=LocalKek(TEST_KEK))
        async with await Database.connect(url, settings=settings) as worker:
            ledger = ToolLedger(worker, await KeyRing.open(worker))
            try:
                forged = {
                    "version": 99, "set_hash": "sha256:00", "mode": "enforce",
                    "outcome": "allow", "policies": ["refund-small"], "reason": "",
                }  # fmt: skip
                await ledger.execute(call(amount=900), ran, judgment=Judgment(forged))
                denied = (await judge(world.point, REFUND, call(amount=900), "m")).stamp
                assert denied is not None
                await ledger.execute(call(amount=901), ran, judgment=Judgment(denied.to_json()))
            finally:
                await ledger.close()
    problems = (await verify_all(world.db)).problems
    assert any("version 99, which was never published" in p for p in problems)
    assert any("denied the call, yet it was not denied" in p for p in problems)


def test_cedar_is_given_only_the_history_the_set_reads() -> None:
    reads = parse_rules(RUN_LIMIT + WEEKDAY_DEPLOYS)[0]
    assert reads is not None and reads.history_tools == frozenset({"refund"})
    tested = parse_rules(
        '@id("h") permit(principal, action, resource) '
        'when { context.history has deploy && context.history["lookup"].day.calls < 9 };'
    )[0]
    assert tested is not None and tested.history_tools == frozenset({"deploy", "lookup"})
    whole = parse_rules(
        '@id("w") permit(principal, action, resource) when { context.history == {} };'
    )[0]
    assert whole is not None and whole.history_tools is None
    none = parse_rules(REFUND_TIERS)[0]
    assert none is not None and none.history_tools == frozenset()
    assert reads.reads_history_of("refund", "effect:single_attempt")
    assert not reads.reads_history_of("deploy", "effect:single_attempt")
    grouped = parse_rules(
        '@id("g") permit(principal, action in Action::"effect:read", resource) '
        "when { context.history.lookup.calls < 9 };"
    )[0]
    assert grouped is not None and grouped.reads_history_of("lookup", "effect:read")
    assert not grouped.reads_history_of("refund", "effect:single_attempt")


async def test_a_limit_on_another_tools_history(world: PolicyWorld) -> None:
    await world.sets.publish(
        """
        @id("deploys") permit(principal, action == Action::"deploy", resource);
        @id("refunds-before-deploys") permit(principal, action == Action::"refund", resource)
        when { context.history.deploy.calls < 1 };
        """,
        by=ADMIN,
    )
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    before = await judge(world.point, REFUND, call(run_id=run_id, amount=5), "agent-7")
    assert before.outcome is Outcome.ALLOW
    deploy = ToolSpec("deploy", Effect.IDEMPOTENT_WRITE)
    deploying = call("deploy", run_id=run_id, env="prod")
    verdict = await judge(world.point, deploy, deploying, "agent-7")
    outcome = await run(world.ledger, world.store, deploy, deploying, ran_deploy, verdict=verdict)
    assert outcome.status is CallStatus.SUCCEEDED
    after = await judge(world.point, REFUND, call(run_id=run_id, amount=5), "agent-7")
    assert after.outcome is Outcome.DENY
    assert before.seen == 0 and after.seen == 1  # the refund policy counted the run's calls
    assert verdict.stamp is not None and verdict.seen is None  # no deploy policy reads it


async def ran_deploy(args: dict[str, Any], context: CallContext) -> str:
    return f"deployed to {args['env']}"
