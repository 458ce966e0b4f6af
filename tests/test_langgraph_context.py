"""What a LangGraph agent's approval request carries for reviewers: the model's text beside the
tool call and the user's last message (sealed, revealed), and the tool's argument schema, which
edits are checked against. Every way in: create_agent (per call, batched) and a custom graph's
tool node. Real PostgreSQL, real LangGraph, a scripted chat model."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import StructuredTool

from approvals import ApprovalPolicy, Decision, RequestContext
from ledger.keys import LocalKek
from tests.support.directory import list_reviewers
from tests.support.scratch import scratch_database

from .support.agents import (
    SPECS,
    Effects,
    Harness,
    Kind,
    ScriptedModel,
    answer_all,
    build_agent,
    build_tools,
    create_effects_table,
    open_harness,
    requests_of,
    thread,
)
from .support.processes import TEST_KEK

KINDS = pytest.mark.parametrize("kind", list(Kind), ids=[k.value for k in Kind])
REASON = "The parcel never arrived, so I am refunding the full 120 EUR."
CONVERSATION = [
    HumanMessage(content="Hi, it's me again about my order."),
    HumanMessage(content=[{"type": "text", "text": "Please refund order A7, it never came."}]),
]
ASKING = [
    AIMessage(
        content=REASON,
        tool_calls=[
            {
                "id": "refund-1",
                "name": "refund",
                "args": {"order_id": "A7", "amount": 120},
                "type": "tool_call",
            }
        ],
    ),
    AIMessage(content="Done with the refund."),
]


@pytest.fixture(scope="module")
async def harness(server_url: str) -> AsyncIterator[Harness]:
    async with scratch_database(server_url, prefix="signoff_context") as url:
        await list_reviewers(url)
        async with open_harness(url, LocalKek(TEST_KEK)) as opened:
            await create_effects_table(opened.db)
            yield opened


async def paused(
    harness: Harness, kind: Kind, thread_id: str, tools: list[Any] | None = None
) -> tuple[Any, ScriptedModel, str, Any]:
    """The agent of `kind` run on CONVERSATION until it pauses for the refund; the graph, its
    model, the approval id and the interrupts."""
    model = ScriptedModel(script=ASKING)
    tools = tools or build_tools(Effects(harness.db))
    graph = build_agent(kind, model, tools, harness.signoff(), harness.saver)
    await graph.ainvoke({"messages": list(CONVERSATION)}, thread(thread_id))
    interrupts = list((await graph.aget_state(thread(thread_id))).interrupts)
    [request] = requests_of(interrupts)
    return graph, model, request["approval_id"], interrupts


@KINDS
async def test_the_request_carries_the_reason_the_last_user_message_and_the_tools_schema(
    harness: Harness, kind: Kind
) -> None:
    _, _, approval_id, _ = await paused(harness, kind, f"ctx-{uuid.uuid4().hex[:8]}")
    approval = await harness.store.get(approval_id, reveal=True)
    assert approval.context == RequestContext(REASON, "Please refund order A7, it never came.")
    schema = approval.policy.args_schema
    assert schema is not None
    assert schema["properties"]["order_id"]["type"] == "string"
    assert schema["properties"]["amount"]["type"] == "integer"
    assert set(schema["required"]) == {"order_id", "amount"}
    assert "config" not in schema["properties"]  # injected, not the model's to give


@KINDS
async def test_a_resumed_edit_that_breaks_the_schema_is_refused_and_asked_again(
    harness: Harness, kind: Kind
) -> None:
    thread_id = f"edit-{uuid.uuid4().hex[:8]}"
    graph, _, approval_id, interrupts = await paused(harness, kind, thread_id)
    bad = {"type": "edit", "edited_action": {"name": "refund", "args": {"order_id": "A7"}}}
    await graph.ainvoke(answer_all(interrupts, bad), thread(thread_id))
    again = list((await graph.aget_state(thread(thread_id))).interrupts)
    assert "'amount' is a required property" in again[0].value["refused"]
    assert (await harness.store.get(approval_id)).reviews == ()


@KINDS
async def test_a_reviewers_reason_for_rejecting_reaches_the_model(
    harness: Harness, kind: Kind
) -> None:
    thread_id = f"reject-{uuid.uuid4().hex[:8]}"
    graph, model, approval_id, interrupts = await paused(harness, kind, thread_id)
    await harness.store.decide(approval_id, Decision.reject("wrong order: it was B2"), "alice")
    await graph.ainvoke(answer_all(interrupts, None), thread(thread_id))
    seen = model.seen[-1][-1]
    assert isinstance(seen, ToolMessage)
    assert seen.content == (
        "A reviewer rejected the call to `refund`: wrong order: it was B2. It did not run."
    )


async def test_a_schema_the_policy_cannot_carry_is_left_out_and_the_call_still_asks(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """A tool whose schema is larger than a policy may carry: logged, never failing."""

    async def refund(order_id: str, amount: int) -> str:
        return f"refunded {amount} EUR on {order_id}"

    huge = StructuredTool.from_function(
        coroutine=refund, name="refund", description="Refund money. " + "x" * 40_000
    )
    with caplog.at_level(logging.WARNING, logger="signoff"):
        _, _, approval_id, _ = await paused(
            harness, Kind.GRAPH, f"huge-{uuid.uuid4().hex[:8]}", tools=[huge]
        )
    approval = await harness.store.get(approval_id, reveal=True)
    assert approval.policy.args_schema is None
    assert approval.policy == next(s.approval for s in SPECS if s.name == "refund")
    assert approval.context is not None and approval.context.reason == REASON
    [warned] = [r for r in caplog.records if "tool schema not stored" in r.getMessage()]
    assert warned.__dict__.get("tool") == "refund"
    assert "xxxx" not in caplog.text and "Refund money" not in caplog.text


def test_a_policy_with_its_own_schema_keeps_it() -> None:
    from adapters.langgraph.request_context import with_args_schema

    own = ApprovalPolicy(args_schema={"type": "object"})
    [tool, *_] = build_tools(Effects(None))  # type: ignore[arg-type]
    assert with_args_schema(own, tool) is own
