"""LangGraph agents under a published policy set: every tool call is judged by the policy
decision point that `SignoffTools` builds over its database. Refunds up to 50 run unasked, up to
500 wait for a support lead, above that are refused without a pause; with no set published the
tools' specs decide, as before. Real PostgreSQL, real Cedar, real LangGraph, a scripted model.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, tool
from langgraph.types import Command

from adapters.langgraph import SignoffTools, ToolSpec, encrypted_checkpointer
from approvals import ApprovalPolicy, ApprovalStatus, ApprovalStore, Decision, ReviewerDirectory
from approvals.policies import ADMIN_GROUP, PolicySets
from ledger.calls import Effect, ToolLedger
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.settings import Settings
from tests.support.policies import ADMIN, TOOLS, PolicyWorld, policy_world
from tests.support.worker_login import worker_login

from .support.agents import (
    Graph,
    Kind,
    ScriptedModel,
    answer_all,
    build_agent,
    calls,
    requests_of,
    thread,
)
from .support.processes import TEST_KEK, TEST_REVIEWER_KEK
from .test_policy_point import REFUND_TIERS

KINDS = pytest.mark.parametrize("kind", list(Kind), ids=[k.value for k in Kind])
SPECS = [ToolSpec("refund", effect=Effect.SINGLE_ATTEMPT)]


@pytest.fixture(scope="module")
async def world(server_url: str) -> AsyncIterator[PolicyWorld]:
    """A database of this module's own (a published set governs all of its calls) whose active
    set is the refund tiers."""
    async with policy_world(server_url, prefix="signoff_lg_policy") as w:
        await w.sets.publish(REFUND_TIERS, by=ADMIN)
        yield w


def refund_tool(ran: list[int]) -> BaseTool:
    @tool
    async def refund(amount: int, config: RunnableConfig) -> str:
        """Refund money to a customer."""
        ran.append(amount)
        return f"refunded {amount} EUR"

    return refund


def script(*amounts: int) -> list[AIMessage]:
    """One model message refunding each amount (call ids `r-<amount>`), then an answer."""
    return [
        calls(*((f"r-{a}", "refund", {"amount": a}) for a in amounts)),
        AIMessage(content="Done."),
    ]


def agent(kind: Kind, tools: SignoffTools, saver: Any, ran: list[int], *amounts: int) -> Graph:
    """The agent of `kind` whose model refunds `amounts` in one message."""
    model = ScriptedModel(script=script(*amounts))
    return build_agent(kind, model, [refund_tool(ran)], tools, saver)


async def started(db: Database, run_id: str, call_id: str) -> dict[str, Any]:
    """The data of the call's `call.started` event."""
    async with db.connection() as conn:
        text = await conn.fetchval(
            "SELECT data::text FROM events WHERE stream_id = $1 AND version = 1",
            f"call:{run_id}/{call_id}",
        )
    assert text is not None, f"no call.started for {call_id}"
    data: dict[str, Any] = json.loads(text)
    return data


def tool_replies(messages: list[Any]) -> dict[str, ToolMessage]:
    return {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}


async def test_without_a_published_set_the_tools_spec_still_asks(server_url: str) -> None:
    async with policy_world(server_url, prefix="signoff_lg_no_set") as world:
        thread_id = f"no-set-{uuid.uuid4().hex[:8]}"
        config = thread(thread_id)
        ran: list[int] = []
        specs = [ToolSpec("refund", approval=ApprovalPolicy())]
        async with (
            encrypted_checkpointer(world.db, world.ring, max_size=2) as saver,
            SignoffTools(world.ledger, world.store, specs) as tools,
        ):
            graph = agent(Kind.BATCHED, tools, saver, ran, 900)
            await graph.ainvoke({"messages": [HumanMessage(content="refund 900")]}, config)
            interrupts = list((await graph.aget_state(config)).interrupts)
            [request] = requests_of(interrupts)
            assert request["tool_call_id"] == "r-900" and ran == []
            await graph.ainvoke(answer_all(interrupts, {"type": "approve"}), config)
        assert ran == [900]
        assert "policy_decision" not in await started(world.db, thread_id, "r-900")


@KINDS
async def test_refund_tiers_run_ask_and_refuse(world: PolicyWorld, kind: Kind) -> None:
    thread_id = f"tiers-{kind.value}-{uuid.uuid4().hex[:8]}"
    config = thread(thread_id)
    ran: list[int] = []
    async with (
        encrypted_checkpointer(world.db, world.ring, max_size=2) as saver,
        SignoffTools(world.ledger, world.store, SPECS) as tools,
    ):
        model = ScriptedModel(script=script(20, 80, 900))
        graph = build_agent(kind, model, [refund_tool(ran)], tools, saver)
        await graph.ainvoke({"messages": [HumanMessage(content="three refunds")]}, config)

        # 80 waits for a support lead; 20 and 900 are not asked about.
        interrupts = list((await graph.aget_state(config)).interrupts)
        [request] = requests_of(interrupts)
        assert request["tool_call_id"] == "r-80"
        approval = await world.store.get(request["approval_id"])
        assert approval.policy.approvers == frozenset({"group:support-lead"})
        assert 900 not in ran

        await world.store.decide(approval.approval_id, Decision.approve(), "alice")
        out = await graph.ainvoke(Command(resume="continue"), config)

    assert sorted(ran) == [20, 80], "each allowed or approved refund ran once, 900 never"
    assert [a.approval_id for a in await world.store.find(run_id=thread_id)] == [
        approval.approval_id
    ], "the resume found the request it paused for"
    assert (await world.store.get(approval.approval_id)).status is ApprovalStatus.APPROVED

    replies = tool_replies(out["messages"])
    assert replies["r-20"].status == "success" and replies["r-80"].status == "success"
    refused = replies["r-900"]
    assert refused.status == "error"
    assert "Signoff's policy refused" in str(refused.content)
    assert "refunds above 500 are refused" in str(refused.content)
    assert refused in model.seen[-1], "the model read the refusal"

    small = await started(world.db, thread_id, "r-20")
    assert small["policy_decision"]["outcome"] == "allow"
    assert small["policy_decision"]["policies"] == ["refund-small"]
    assert (await started(world.db, thread_id, "r-80"))["approval_id"] == approval.approval_id
    large = await started(world.db, thread_id, "r-900")
    assert large["policy_decision"]["outcome"] == "deny"


async def test_a_worker_login_is_judged_by_the_set_the_reviewer_side_published(
    server_url: str,
) -> None:
    """The agent on a login with only `signoff_app`: it registers its tool, reads and checks
    the signed set, asks and records under it; the set is published and the approval decided
    on the owner's side."""
    kek = LocalKek(TEST_KEK)
    async with worker_login(server_url, kek, prefix="signoff_lg_policy_worker") as login:
        owner_settings = Settings(
            database_url=login.owner_url, kek=kek, reviewer_kek=LocalKek(TEST_REVIEWER_KEK)
        )
        async with (
            await Database.connect(login.owner_url, settings=owner_settings) as owner,
            await Database.connect(login.url, settings=login.settings) as worker,
        ):
            owner_ring = await KeyRing.open(owner)
            directory = ReviewerDirectory(owner)
            await directory.add(ADMIN, [ADMIN_GROUP], by="owner")
            await directory.add("alice", ["support-lead"], by="owner")
            sets = PolicySets(owner, owner_ring)
            await sets.register(TOOLS)
            await sets.publish(REFUND_TIERS, by=ADMIN)
            reviewer = ApprovalStore(owner, owner_ring)

            ring = await KeyRing.open(worker)
            store, ledger = ApprovalStore(worker, ring), ToolLedger(worker, ring)
            thread_id = f"worker-{uuid.uuid4().hex[:8]}"
            config = thread(thread_id)
            ran: list[int] = []
            try:
                async with (
                    encrypted_checkpointer(worker, ring, max_size=2) as saver,
                    SignoffTools(ledger, store, SPECS) as tools,
                ):
                    model = ScriptedModel(script=script(20, 80, 900))
                    graph = build_agent(Kind.BATCHED, model, [refund_tool(ran)], tools, saver)
                    await graph.ainvoke({"messages": [HumanMessage(content="refunds")]}, config)
                    [request] = requests_of(list((await graph.aget_state(config)).interrupts))
                    assert request["tool_call_id"] == "r-80"
                    await reviewer.decide(request["approval_id"], Decision.approve(), "alice")
                    out = await graph.ainvoke(Command(resume="continue"), config)
            finally:
                await ledger.close()
                await store.close()
                await reviewer.close()
            assert sorted(ran) == [20, 80]
            assert tool_replies(out["messages"])["r-900"].status == "error"
            large = await started(owner, thread_id, "r-900")
            assert large["policy_decision"]["outcome"] == "deny"
