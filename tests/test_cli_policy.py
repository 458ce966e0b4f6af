"""`signoff policy`: publish (refused with Cedar's diagnostics when invalid), show, list, schema
and test a call, each in its own process, as an administrator would."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from adapters.runtime import ToolSpec, judge, run
from ledger.calls import CallContext, ToolCall
from tests.support.policies import ADMIN, PolicyWorld, policy_world
from tests.support.processes import kek_env, run_cli

TIERS = """
@id("refund-small")
permit(principal, action == Action::"refund", resource) when { context.input.amount <= 50 };

@id("refund-lead") @approval("over 50") @approvers("group:support-lead")
permit(principal, action == Action::"refund", resource)
when { context.input.amount > 50 && context.input.amount <= 500 };

@id("refund-cap") @reason("refunds above 500 are refused")
forbid(principal, action == Action::"refund", resource) when { context.input.amount > 500 };
"""


@pytest.fixture
async def world(server_url: str) -> AsyncIterator[PolicyWorld]:
    async with policy_world(server_url, prefix="signoff_cli_policy") as w:
        yield w


async def test_publish_show_and_test_a_call(world: PolicyWorld, tmp_path: Path) -> None:
    cedar = tmp_path / "refunds.cedar"
    cedar.write_text(TIERS)
    env = kek_env()
    published = await run_cli(
        "policy", "publish", str(cedar), "--by", ADMIN, "--json", database_url=world.url, env=env
    )
    assert published.code == 0, published.stderr
    document = json.loads(published.stdout)
    assert document["version"] == 1
    assert document["policy_ids"] == ["refund-small", "refund-lead", "refund-cap"]

    tested = await run_cli(
        "policy", "test", "--tool", "refund", "--args", '{"amount": 80}',
        "--principal", "agent-7", "--run", "R",
        database_url=world.url, env=env,
    )  # fmt: skip
    assert tested.code == 0, tested.stderr
    assert tested.stdout.splitlines()[0] == "approval (version 1, enforce)"
    assert "policies: refund-lead" in tested.stdout
    assert "approval: group:support-lead, quorum 1" in tested.stdout
    refused = await run_cli(
        "policy", "test", "--tool", "refund", "--args", '{"amount": 900}',
        "--principal", "agent-7", "--run", "R", "--json",
        database_url=world.url, env=env,
    )  # fmt: skip
    assert json.loads(refused.stdout)["reason"] == "refunds above 500 are refused"
    async with world.db.connection() as conn:  # judging records nothing
        assert await conn.fetchval("SELECT count(*) FROM tool_calls") == 0

    shown = await run_cli("policy", "show", database_url=world.url, env=env)
    assert (
        shown.code == 0 and "version 1 (enforce)" in shown.stdout and "refund-cap" in shown.stdout
    )
    listed = await run_cli("policy", "list", "--json", database_url=world.url, env=env)
    assert [s["version"] for s in json.loads(listed.stdout)["policy_sets"]] == [1]
    schema = await run_cli("policy", "schema", database_url=world.url, env=env)
    actions = json.loads(schema.stdout)[""]["actions"]
    assert actions["refund"]["memberOf"] == [{"id": "effect:single_attempt"}]


async def test_an_invalid_set_is_one_line_and_changes_nothing(
    world: PolicyWorld, tmp_path: Path
) -> None:
    cedar = tmp_path / "typo.cedar"
    cedar.write_text(
        '@id("typo") permit(principal, action == Action::"refund", resource) '
        "when { context.input.amout > 1 };"
    )
    refused = await run_cli(
        "policy", "publish", str(cedar), "--by", ADMIN, database_url=world.url, env=kek_env()
    )
    assert refused.code == 2
    assert len(refused.stderr.strip().splitlines()) == 1
    assert "typo" in refused.stderr and "amout" in refused.stderr
    assert await world.sets.head() == 0
    missing = await run_cli("policy", "publish", "--by", ADMIN, database_url=world.url)
    assert missing.code == 2 and "give the Cedar policies" in missing.stderr


async def test_publishing_needs_an_administrator_and_the_reviewer_side(
    world: PolicyWorld, tmp_path: Path
) -> None:
    cedar = tmp_path / "p.cedar"
    cedar.write_text(TIERS)
    not_admin = await run_cli(
        "policy", "publish", str(cedar), "--by", "alice", database_url=world.url, env=kek_env()
    )
    assert not_admin.code == 2 and "policy-admins" in not_admin.stderr
    worker_env = {k: v for k, v in kek_env().items() if k != "SIGNOFF_REVIEWER_KEK"}
    no_kek = await run_cli(
        "policy", "publish", str(cedar), "--by", ADMIN, database_url=world.url, env=worker_env
    )
    assert no_kek.code == 2
    assert await world.sets.head() == 0


async def test_a_calls_story_says_what_the_policy_decided(world: PolicyWorld) -> None:
    await world.sets.publish(TIERS, by=ADMIN)
    refused = ToolCall("R-story", "c-1", "refund", {"amount": 900})
    verdict = await judge(world.point, ToolSpec("refund"), refused, "agent-7")

    async def never(args: dict[str, Any], context: CallContext) -> None:
        raise AssertionError("a denied call ran")

    await run(world.ledger, world.store, ToolSpec("refund"), refused, never, verdict=verdict)
    shown = await run_cli("ledger", "show", "R-story", "c-1", database_url=world.url, env=kek_env())
    assert shown.code == 0, shown.stderr
    assert (
        "policy: deny by set version 1 (enforce; refund-cap): refunds above 500 are refused"
        in shown.stdout
    )
