"""The policy decision point as an attacker would try it: an edit past a forbid, a call that
skipped the policy or used a replaced set, a policy stream appended outside its function, a
crowd of parallel calls in one run, a poisoned history, an effect changed after publishing."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from adapters.runtime import ToolSpec, ask, governed, judge, run
from approvals import ApprovalPolicy, Decision
from approvals.checks import PROJECTIONS, verify_all
from approvals.policies import Outcome, Verdict
from approvals.policies.checks import prepare_stamp_check
from ledger.audit.integrity import StreamCheck, verify_ledger
from ledger.calls import CallContext, CallStatus, Effect, ToolCall, ToolLedger
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.logins import temporary_login
from ledger.store.settings import Settings
from tests.support.policies import ADMIN, PolicyWorld, policy_world
from tests.support.processes import TEST_KEK
from tests.test_policy_point import REFUND, REFUND_TIERS, call, ran


@pytest.fixture
async def world(server_url: str) -> AsyncIterator[PolicyWorld]:
    async with policy_world(server_url, prefix="signoff_policy_attack") as w:
        yield w


async def edited_to(
    world: PolicyWorld, amount: int, *, judged: bool = True
) -> tuple[Any, list[int]]:
    """A refund of 80 (a support lead's approval) that alice approves edited to `amount`."""
    asked = call(amount=80)
    verdict = await judge(world.point, REFUND, asked, "agent-7")
    approval = await ask(world.store, governed(REFUND, verdict), asked, "agent-7", verdict=verdict)
    await world.store.decide(approval.approval_id, Decision.edit({"amount": amount}), "alice")
    seen: list[int] = []

    async def tool(args: dict[str, Any], context: CallContext) -> str:
        seen.append(args["amount"])
        return "ok"

    async def again(c: ToolCall) -> Verdict:
        return await judge(world.point, REFUND, c, "agent-7")

    resumed = await again(asked)
    outcome = await run(
        world.ledger, world.store, governed(REFUND, resumed), asked, tool, approval.approval_id,
        verdict=resumed, judge_again=again if judged else None,
    )  # fmt: skip
    return outcome, seen


async def test_an_edit_past_a_forbid_is_denied(world: PolicyWorld) -> None:
    await world.sets.publish(REFUND_TIERS, by=ADMIN)
    outcome, seen = await edited_to(world, 5000)
    assert seen == [] and outcome.status is CallStatus.DENIED
    assert "edited arguments are refused: refunds above 500 are refused" in outcome.error
    unjudged, seen = await edited_to(world, 100, judged=False)
    assert seen == [] and unjudged.status is CallStatus.DENIED  # nothing to judge it with
    within, seen = await edited_to(world, 120)
    assert seen == [120] and within.status is CallStatus.SUCCEEDED
    smaller, seen = await edited_to(world, 20)  # the set allows it outright: it runs
    assert seen == [20] and smaller.status is CallStatus.SUCCEEDED
    assert (await verify_all(world.db)).ok


async def strict_findings(world: PolicyWorld) -> list[str]:
    """What verify says of the calls' policy decisions with no grace after a publish (a call
    judged before a publish and recorded after it may otherwise carry the version before)."""

    async def strict(db: Database) -> Any:
        return await prepare_stamp_check(db, grace=timedelta(0))

    check = StreamCheck("calls judged by published policy sets", "call:", strict)
    report = await verify_ledger(world.db, PROJECTIONS, [check])
    return report.problems


async def test_verify_reports_a_call_that_skipped_the_policy(world: PolicyWorld) -> None:
    """With an enforce set in force, a worker login records a refund of 900 never judged, and
    one judged by a version replaced since."""
    first = await world.sets.publish(REFUND_TIERS, by=ADMIN)
    stale = await judge(world.point, REFUND, call(amount=20), "agent-7")
    await world.sets.publish(REFUND_TIERS.replace("<= 50", "<= 10"), by=ADMIN)
    async with temporary_login(world.url, "signoff_app") as url:
        settings = Settings(database_url=url, kek=LocalKek(TEST_KEK))
        async with await Database.connect(url, settings=settings) as worker:
            ledger = ToolLedger(worker, await KeyRing.open(worker))
            try:
                await ledger.execute(call(amount=900), ran)
                judgment = stale.judgment
                await ledger.execute(call(amount=20), ran, judgment=judgment)
            finally:
                await ledger.close()
    assert stale.stamp is not None and stale.stamp.version == first.version
    assert (await verify_all(world.db)).ok  # both within a minute of the publish
    problems = await strict_findings(world)
    assert any("carries no policy decision, yet version 2 was in force" in p for p in problems)
    assert any("judged by version 1, which version 2 replaced" in p for p in problems)


async def test_a_policy_stream_is_written_only_with_its_row(world: PolicyWorld) -> None:
    """The reviewer login may not append `policy.published` by `signoff_append`, past the
    administrator check: the next publish still gets version 1."""
    async with temporary_login(world.url, "signoff_reviewer") as url:
        conn = await asyncpg.connect(url)
        try:
            data = json.dumps({"version": 1, "signature": {}, "published_by": "mallory"})
            with pytest.raises(asyncpg.PostgresError) as refused:
                await conn.execute(
                    "SELECT signoff_append('policy:1', 0, ARRAY['policy.published'],"
                    " ARRAY[$1::json], ARRAY['mallory'], NULL)",
                    data,
                )
        finally:
            await conn.close()
    assert refused.value.sqlstate == "SG401"
    assert (await world.sets.publish(REFUND_TIERS, by=ADMIN)).version == 1


async def test_many_parallel_calls_of_one_run_are_judged_until_each_is_recorded(
    world: PolicyWorld,
) -> None:
    """Ten calls of one run at once (a tool node gathers a message's calls) under a set that
    counts the run's calls: each round lets one through, none gives up."""
    await world.sets.publish(
        '@id("many") permit(principal, action == Action::"refund", resource)'
        " when { context.history.refund.calls < 100 };",
        by=ADMIN,
    )
    run_id = f"run-{uuid.uuid4().hex[:8]}"

    async def one(n: int) -> CallStatus:
        c = ToolCall(run_id, f"c{n}", "refund", {"amount": 1})

        async def again(judged: ToolCall) -> Verdict:
            return await judge(world.point, REFUND, judged, "agent-7")

        outcome = await run(
            world.ledger, world.store, REFUND, c, ran, verdict=await again(c), judge_again=again
        )
        return outcome.status

    statuses = await asyncio.gather(*(one(n) for n in range(10)))
    assert statuses == [CallStatus.SUCCEEDED] * 10


async def test_a_poisoned_history_denies_rather_than_raises(world: PolicyWorld) -> None:
    """A call recorded before any set with rate 1e300 leaves a sum Cedar cannot hold: the
    run's later calls are denied with the reason, not left unjudged."""
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    first = ToolCall(run_id, "c1", "refund", {"amount": 1, "rate": 1e300})
    verdict = await judge(world.point, REFUND, first, "a")
    await run(world.ledger, world.store, REFUND, first, ran, verdict=verdict)
    await world.sets.publish(
        '@id("rate") permit(principal, action == Action::"refund", resource)'
        ' when { context.history.refund.sums.rate.lessThan(decimal("10.0")) };',
        by=ADMIN,
    )
    later = ToolCall(run_id, "c2", "refund", {"amount": 1})
    denied = await judge(world.point, REFUND, later, "a")
    assert denied.outcome is Outcome.DENY
    assert "the sum of rate is out of the range" in denied.reason


async def test_a_tool_whose_effect_changed_since_the_publish_is_denied(
    world: PolicyWorld,
) -> None:
    """A worker that says the refund is a read (to fall under a permit for reads) is denied:
    the set judges it as the effect it was registered with."""
    await world.sets.publish(
        '@id("reads") permit(principal, action in Action::"effect:read", resource);', by=ADMIN
    )
    posing = ToolSpec("refund", Effect.READ)
    verdict = await judge(world.point, posing, call(amount=1), "agent-7")
    assert verdict.outcome is Outcome.DENY
    assert "registered as single_attempt" in verdict.reason


async def test_verify_reports_a_weaker_approval_than_the_policy_asks(world: PolicyWorld) -> None:
    """A worker asks a self-confirm approval for a refund of 80 while recording that the set's
    refund-lead (a support lead's approval) asked for it."""
    await world.sets.publish(REFUND_TIERS, by=ADMIN)
    asked = call(amount=80)
    verdict = await judge(world.point, REFUND, asked, "agent-7")
    assert verdict.stamp is not None
    await world.store.request(
        run_id=asked.run_id,
        tool=asked.tool,
        args=asked.args,
        call_id=asked.call_id,
        requested_by="agent-7",
        policy=ApprovalPolicy(),  # the person at the agent confirms
        policy_stamp=verdict.stamp.to_json(),
    )
    problems = (await verify_all(world.db)).problems
    assert any("is not what refund-lead asks (tier, approvers" in p for p in problems), problems


async def test_a_set_that_allows_outright_keeps_a_reviewers_reject(world: PolicyWorld) -> None:
    """A refund asked under the tiers and rejected by alice stays rejected when a set that
    allows every refund is published before the call resumes."""
    await world.sets.publish(REFUND_TIERS, by=ADMIN)
    asked = call(amount=80)
    verdict = await judge(world.point, REFUND, asked, "agent-7")
    approval = await ask(world.store, governed(REFUND, verdict), asked, "agent-7", verdict=verdict)
    await world.store.decide(approval.approval_id, Decision.reject("not this order"), "alice")
    await world.sets.publish(
        '@id("refund-any") permit(principal, action == Action::"refund", resource);', by=ADMIN
    )
    again = await judge(world.point, REFUND, asked, "agent-7")
    assert again.outcome is Outcome.ALLOW
    outcome = await run(
        world.ledger, world.store, governed(REFUND, again), asked, ran, approval.approval_id,
        verdict=again,
    )  # fmt: skip
    assert outcome.status is CallStatus.DENIED and outcome.error == "not this order"
