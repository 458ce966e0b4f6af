"""LangGraph agents through Signoff, both ways in: `create_agent` with `SignoffMiddleware`, and a
custom `StateGraph` whose tool node is `signoff_tool_node`. Real PostgreSQL, real LangGraph, a
scripted chat model, encrypted checkpoints, and real OS processes where a run crosses them."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.types import Command, Interrupt

from adapters.langgraph import resume_config
from adapters.langgraph.middleware import EDIT_NOTICE
from adapters.runtime import DecisionConflict
from approvals import ApprovalAlreadyDecided, ApprovalStatus, Decision, DecisionNotAllowed
from ledger.keys import LocalKek
from tests.support.directory import list_reviewers
from tests.support.scratch import scratch_database

from .support.agents import (
    SCRIPTS,
    Effects,
    Graph,
    Harness,
    Kind,
    ScriptedModel,
    answer_all,
    before_tools,
    build_self_interrupting_tool,
    calls_of,
    create_effects_table,
    effects_of,
    open_harness,
    requests_of,
    summary,
    thread,
)
from .support.processes import TEST_KEK, finish, kek_env, run_cli, start_program

KINDS = pytest.mark.parametrize("kind", list(Kind), ids=[k.value for k in Kind])
ASK = "Please refund order A7."
REQUEST_KEYS = {
    "type",
    "tool_call_id",
    "name",
    "args",
    "description",
    "approval_id",
    "allowed_decisions",
}
BATCHED_KEYS = {"name", "args", "description", "tool_call_id", "approval_id", "status"}


@pytest.fixture(scope="module")
async def agents_url(server_url: str) -> AsyncIterator[str]:
    """A database of this module's own, so LangGraph's checkpoint tables stay out of the
    shared one."""
    async with scratch_database(server_url, prefix="signoff_agents") as url:
        await list_reviewers(url)
        yield url


@pytest.fixture(scope="module")
async def harness(agents_url: str) -> AsyncIterator[Harness]:
    async with open_harness(agents_url, LocalKek(TEST_KEK)) as opened:
        await create_effects_table(opened.db)
        yield opened


def new_thread(what: str, kind: Kind) -> str:
    return f"{what}-{kind.value}-{uuid.uuid4().hex[:8]}"


async def start(
    harness: Harness, kind: Kind, script: str, thread_id: str
) -> tuple[Graph, ScriptedModel, list[Interrupt]]:
    """Run the agent on a new thread until it finishes or pauses; its pending interrupts."""
    graph, model = harness.agent(kind, script)
    await graph.ainvoke({"messages": [HumanMessage(content=ASK)]}, thread(thread_id))
    return graph, model, list((await graph.aget_state(thread(thread_id))).interrupts)


def tool_messages(messages: list[Any]) -> dict[str, dict[str, Any]]:
    """The tool messages of a conversation (summaries), by tool call id."""
    return {m["tool_call_id"]: m for m in summary(messages) if m["type"] == "tool"}


async def refunds(harness: Harness, thread_id: str) -> list[dict[str, Any]]:
    return [e["args"] for e in await effects_of(harness.db, thread_id, "refund")]


async def resume_in_a_worker(
    url: str, kind: Kind, approval_id: str, value: str, *options: str
) -> dict[str, Any]:
    """`tests.support.agent_workers resume` in its own process; what it printed."""
    worker = await start_program(
        "tests.support.agent_workers",
        "resume",
        url,
        kind.value,
        "refund",
        approval_id,
        value,
        *options,
        env=kek_env(),
    )
    result: dict[str, Any] = json.loads((await finish(worker, within=60)).splitlines()[-1])
    return result


# -- one process -------------------------------------------------------------------------------


@KINDS
async def test_a_read_only_turn_runs_its_tool_once_and_replays_it_on_reinvoke(
    harness: Harness, kind: Kind
) -> None:
    thread_id = new_thread("read", kind)
    graph, model, interrupts = await start(harness, kind, "read", thread_id)

    assert interrupts == []
    assert await harness.store.find(run_id=thread_id) == [], "a read asks nobody"
    state = await graph.aget_state(thread(thread_id))
    assert tool_messages(state.values["messages"])["read-1"]["content"] == (
        "order A7: 120 EUR, delivered"
    )
    assert state.values["messages"][-1].content == "Order A7 was delivered."
    ledger = await calls_of(harness.db, thread_id)
    assert {k: (v["tool"], v["status"]) for k, v in ledger.items()} == {
        "read-1": ("lookup_order", "succeeded")
    }

    # Invoking again from the checkpoint before the tools (a retry, a fork) replays the call.
    out = await graph.ainvoke(None, await before_tools(graph, thread(thread_id)))
    assert tool_messages(out["messages"])["read-1"]["content"] == "order A7: 120 EUR, delivered"
    assert len(await effects_of(harness.db, thread_id, "lookup_order")) == 1
    assert len(model.seen) == 3, "the model ran for each turn, the tool only once"


@KINDS
async def test_parallel_calls_of_one_message_each_run_once(harness: Harness, kind: Kind) -> None:
    thread_id = new_thread("parallel", kind)
    graph, _, interrupts = await start(harness, kind, "parallel", thread_id)

    requests = requests_of(interrupts)
    assert [(r["tool_call_id"], r["args"]) for r in requests] == [
        ("par-2", {"order_id": "A7", "amount": 120}),
        ("par-3", {"order_id": "B2", "amount": 30}),
    ]
    if kind is Kind.BATCHED:  # HumanInTheLoopMiddleware's action requests, plus our ids
        assert all(set(r) == BATCHED_KEYS and r["status"] == "pending" for r in requests)
    else:
        assert all(set(r) == REQUEST_KEYS and r["type"] == "tool_approval" for r in requests)
    if kind is Kind.GRAPH:
        assert all(r["description"] == "Refund money to a customer" for r in requests)
    else:  # HumanInTheLoopMiddleware's description: the spec's text, then tool and arguments
        assert [r["description"] for r in requests] == [
            f"Refund money to a customer\n\nTool: refund\nArgs: {r['args']}" for r in requests
        ]
    if kind is Kind.GRAPH:  # every approval of the message deferred into one pause
        assert len(interrupts) == 1
        assert interrupts[0].value == {"type": "tool_approvals", "requests": requests}
    elif kind is Kind.BATCHED:  # one pause for the message, after the model
        assert len(interrupts) == 1
        assert interrupts[0].value == {
            "action_requests": requests,
            "review_configs": [
                {
                    "action_name": "refund",
                    "allowed_decisions": ["approve", "reject", "edit", "respond"],
                }
            ]
            * 2,
        }
    else:  # create_agent runs each call as its own task: one pause per call
        assert len(interrupts) == 2
    assert await refunds(harness, thread_id) == []

    out = await graph.ainvoke(answer_all(interrupts, {"type": "approve"}), thread(thread_id))
    assert {k: (m["status"], m["content"]) for k, m in tool_messages(out["messages"]).items()} == {
        "par-1": ("success", "order A7: 120 EUR, delivered"),
        "par-2": ("success", "refunded 120 EUR on A7"),
        "par-3": ("success", "refunded 30 EUR on B2"),
    }
    assert out["messages"][-1].content == "Both refunds are done."

    await graph.ainvoke(None, await before_tools(graph, thread(thread_id)))  # replayed
    assert sorted(await refunds(harness, thread_id), key=str) == [
        {"order_id": "A7", "amount": 120},
        {"order_id": "B2", "amount": 30},
    ]
    assert len(await effects_of(harness.db, thread_id, "lookup_order")) == 1
    ledger = await calls_of(harness.db, thread_id)
    assert {k: v["status"] for k, v in ledger.items()} == dict.fromkeys(
        ("par-1", "par-2", "par-3"), "succeeded"
    )


EDITED = {"order_id": "A7", "amount": 60}
DECISIONS: dict[str, tuple[dict[str, Any], str, str, str, list[dict[str, Any]]]] = {
    # resume value (HumanInTheLoopMiddleware's shape) -> the tool message's content and status,
    # the ledger's status, the refunds made
    "approve": (
        {"type": "approve"},
        "refunded 120 EUR on A7",
        "success",
        "succeeded",
        [{"order_id": "A7", "amount": 120}],
    ),
    "reject": (
        {"type": "reject", "message": "over the limit for this customer"},
        "A reviewer rejected the call to `refund`: over the limit for this customer. "
        "It did not run.",
        "error",
        "denied",
        [],
    ),
    "edit": (
        {"type": "edit", "edited_action": {"name": "refund", "args": EDITED}},
        "refunded 60 EUR on A7",
        "success",
        "succeeded",
        [EDITED],
    ),
    "respond": (
        {"type": "respond", "message": "Finance will call you about A7 today."},
        "Finance will call you about A7 today.",
        "success",
        "responded",
        [],
    ),
}


@KINDS
@pytest.mark.parametrize("decision", list(DECISIONS))
async def test_a_reviewers_decision_reaches_the_model_as_hitl_middleware_would_give_it(
    harness: Harness, kind: Kind, decision: str
) -> None:
    value, content, status, recorded, refunded = DECISIONS[decision]
    thread_id = new_thread(decision, kind)
    graph, model, interrupts = await start(harness, kind, "refund", thread_id)
    [request] = requests_of(interrupts)
    assert request["args"] == {"order_id": "A7", "amount": 120}

    await graph.ainvoke(answer_all(interrupts, value), thread(thread_id))

    seen = model.seen[-1][-1]  # what the model read before its last reply
    assert isinstance(seen, ToolMessage)
    if decision == "edit" and kind is not Kind.GRAPH:  # told, as HumanInTheLoopMiddleware tells it
        content = (
            f"{EDIT_NOTICE} Executed instead: refund with arguments "
            f'{{"amount": 60, "order_id": "A7"}}.\n\nTool response:\n{content}'
        )
    assert (seen.tool_call_id, seen.content, seen.status) == ("refund-1", content, status)
    assert await refunds(harness, thread_id) == refunded
    call = (await calls_of(harness.db, thread_id))["refund-1"]
    assert (call["status"], call["approval_id"]) == (recorded, request["approval_id"])
    approval = await harness.store.get(request["approval_id"])
    assert approval.consumed_by == f"{thread_id}/refund-1"
    assert approval.status is ApprovalStatus(
        {"approve": "approved", "reject": "rejected", "edit": "edited", "respond": "responded"}[
            decision
        ]
    )


@KINDS
async def test_store_decided_mode_pauses_again_until_the_store_has_a_decision(
    harness: Harness, kind: Kind
) -> None:
    thread_id = new_thread("store", kind)
    graph, _, interrupts = await start(harness, kind, "refund", thread_id)
    [request] = requests_of(interrupts)

    for nothing in (answer_all(interrupts, None), Command(resume="continue")):
        out = await graph.ainvoke(nothing, thread(thread_id))
        again = list((await graph.aget_state(thread(thread_id))).interrupts)
        assert out.get("__interrupt__"), "still pending: paused again"
        assert [r["approval_id"] for r in requests_of(again)] == [request["approval_id"]]
    assert await refunds(harness, thread_id) == []

    await harness.store.decide(request["approval_id"], Decision.approve(), "alice")
    out = await graph.ainvoke(Command(resume="continue"), thread(thread_id))
    assert tool_messages(out["messages"])["refund-1"]["content"] == "refunded 120 EUR on A7"
    assert await refunds(harness, thread_id) == [{"order_id": "A7", "amount": 120}]
    assert (await harness.store.get(request["approval_id"])).decided_by == ("alice",)


@KINDS
async def test_a_second_model_call_that_asks_for_tools_again_runs_them_too(
    harness: Harness, kind: Kind
) -> None:
    thread_id = new_thread("turns", kind)
    graph, model, interrupts = await start(harness, kind, "two-turns", thread_id)
    assert [r["tool_call_id"] for r in requests_of(interrupts)] == ["turn2-1"]

    out = await graph.ainvoke(answer_all(interrupts, {"type": "approve"}), thread(thread_id))
    assert [m["content"] for m in summary(out["messages"]) if m["type"] == "tool"] == [
        "order A7: 120 EUR, delivered",
        "refunded 120 EUR on A7",
    ]
    assert out["messages"][-1].content == "Looked it up, then refunded it."
    assert len(model.seen) == 3, "three model calls: two asked for tools"
    ledger = await calls_of(harness.db, thread_id)
    assert {k: (v["status"], v["idempotency_key"]) for k, v in ledger.items()} == {
        "turn1-1": ("succeeded", f"{thread_id}/1/turn1-1"),
        "turn2-1": ("succeeded", f"{thread_id}/2/turn2-1"),
    }
    # The tools were told the same keys, through their config.
    assert [e["idempotency_key"] for e in await effects_of(harness.db, thread_id)] == [
        f"{thread_id}/1/turn1-1",
        f"{thread_id}/2/turn2-1",
    ]


@KINDS
async def test_unknown_tools_repeated_call_ids_and_bad_arguments_reach_the_model_as_errors(
    harness: Harness, kind: Kind
) -> None:
    thread_id = new_thread("mistakes", kind)
    graph, model, interrupts = await start(harness, kind, "mistakes", thread_id)

    assert interrupts == [], "a refused call asks nobody"
    assert await harness.store.find(run_id=thread_id) == []
    seen = [m for m in model.seen[-1] if isinstance(m, ToolMessage)]
    assert [(m.tool_call_id, m.status) for m in seen] == [
        ("bad-1", "error"),
        ("bad-2", "error"),
        ("bad-3", "error"),
        ("bad-3", "error"),
    ]
    unknown, bad_args, *repeated = (str(m.content) for m in seen)
    assert "cancel_everything" in unknown and "lookup_order" in unknown  # the tools there are
    assert "order_id" in bad_args  # the field the arguments lack
    assert all("'bad-3' appears 2 times" in r and "none of them ran" in r for r in repeated)
    assert (await graph.aget_state(thread(thread_id))).values["messages"][-1].content == (
        "Some of that did not work."
    )
    ledger = await calls_of(harness.db, thread_id)
    assert {k: (v["tool"], v["status"]) for k, v in ledger.items()} == {
        "bad-1": ("cancel_everything", "failed"),
        "bad-2": ("lookup_order", "failed"),
        "bad-3": ("refund", "failed"),
    }
    assert await effects_of(harness.db, thread_id) == []

    # Replaying the message gives the model the same errors.
    out = await graph.ainvoke(None, await before_tools(graph, thread(thread_id)))
    replayed = [m for m in out["messages"] if isinstance(m, ToolMessage)]
    assert [m.content for m in replayed] == [m.content for m in seen]
    assert await effects_of(harness.db, thread_id) == []


async def test_langgraph_6208_a_self_interrupting_tool_repeats_its_side_effect_signoff_does_not(
    harness: Harness,
) -> None:
    # Plain create_agent: the tool refunds, then asks with interrupt() itself. LangGraph runs
    # the tool again from the top on resume, so the refund happens again.
    plain_thread = new_thread("plain-6208", Kind.AGENT)
    plain = create_agent(
        ScriptedModel(script=SCRIPTS["own-interrupt"]),
        tools=[build_self_interrupting_tool(Effects(harness.db))],
        checkpointer=harness.saver,
    )
    await plain.ainvoke({"messages": [HumanMessage(content=ASK)]}, thread(plain_thread))
    assert len(await refunds(harness, plain_thread)) == 1, "refunded before anyone was asked"
    out = await plain.ainvoke(Command(resume="yes"), thread(plain_thread))
    assert tool_messages(out["messages"])["own-1"]["content"] == "refunded 120 EUR on A7 (yes)"
    assert len(await refunds(harness, plain_thread)) == 2, "langgraph#6208: refunded twice"

    # Signoff: the same refund behind ToolRule(approval=ApprovalPolicy()).
    thread_id = new_thread("signoff-6208", Kind.AGENT)
    graph, _, interrupts = await start(harness, Kind.AGENT, "refund", thread_id)
    paused = (await graph.aget_state(thread(thread_id))).config
    assert await refunds(harness, thread_id) == [], "nothing runs before the approval"
    approve = answer_all(interrupts, {"type": "approve"})
    await graph.ainvoke(approve, thread(thread_id))
    await graph.ainvoke(approve, paused)  # an extra resume of the same pause
    await graph.ainvoke(None, await before_tools(graph, thread(thread_id)))  # and a replay
    assert await refunds(harness, thread_id) == [{"order_id": "A7", "amount": 120}]


# -- several processes -------------------------------------------------------------------------


@KINDS
async def test_an_approval_decided_in_another_process_resumes_the_thread_in_a_third(
    harness: Harness, agents_url: str, kind: Kind
) -> None:
    thread_id = new_thread("processes", kind)
    graph, _, interrupts = await start(harness, kind, "refund", thread_id)
    [request] = requests_of(interrupts)
    approval = await harness.store.get(request["approval_id"])
    # The thread's config is stored with the approval: enough to see the pause from anywhere.
    assert resume_config(approval) == {"configurable": {"thread_id": thread_id}}
    seen_from_approval = await graph.aget_state(resume_config(approval))
    paused_at = "SignoffMiddleware.after_model" if kind is Kind.BATCHED else "tools"
    assert seen_from_approval.next == (paused_at,) and seen_from_approval.interrupts

    decided = await run_cli(
        "approvals",
        "decide",
        request["approval_id"],
        "--approve",
        "--by",
        "alice",
        "--json",
        database_url=agents_url,
        env=kek_env(),
    )
    assert decided.code == 0, decided.stderr
    assert json.loads(decided.stdout)["status"] == "approved"

    # The worker is told only the approval id; it finds the thread from the stored config.
    resumed = await resume_in_a_worker(agents_url, kind, request["approval_id"], "continue")
    assert resumed["pid"] != os.getpid() and resumed["thread_id"] == thread_id
    assert resumed["paused"] is False
    assert tool_messages_of(resumed)["refund-1"]["content"] == "refunded 120 EUR on A7"
    assert resumed["messages"][-1]["content"] == "I have dealt with the refund."
    [effect] = await effects_of(harness.db, thread_id, "refund")
    assert effect["pid"] == resumed["pid"]

    # Back here, the checkpoints the worker wrote (encrypted) show the finished run.
    state = await graph.aget_state(thread(thread_id))
    assert state.next == () and state.values["messages"][-1].content == (
        "I have dealt with the refund."
    )
    approval = await harness.store.get(request["approval_id"])
    assert (approval.decided_by, approval.consumed_by) == (("alice",), f"{thread_id}/refund-1")


def tool_messages_of(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["tool_call_id"]: m for m in result["messages"] if m["type"] == "tool"}


@KINDS
async def test_a_signed_token_resumes_once_and_a_second_resume_with_it_runs_nothing(
    harness: Harness, agents_url: str, kind: Kind
) -> None:
    thread_id = new_thread("token", kind)
    graph, _, interrupts = await start(harness, kind, "refund", thread_id)
    paused = (await graph.aget_state(thread(thread_id))).config
    [request] = requests_of(interrupts)
    await harness.store.decide(request["approval_id"], Decision.approve(), "alice")
    token = await harness.store.issue_token(request["approval_id"])

    out = await graph.ainvoke(answer_all(interrupts, token), thread(thread_id))
    assert tool_messages(out["messages"])["refund-1"]["content"] == "refunded 120 EUR on A7"

    # The same token again, from the paused checkpoint, in another process: nothing runs; the
    # call's recorded outcome is replayed.
    again = await resume_in_a_worker(
        agents_url,
        kind,
        request["approval_id"],
        token,
        "--checkpoint",
        str(paused["configurable"]["checkpoint_id"]),
    )
    assert "raised" not in again, again
    assert tool_messages_of(again)["refund-1"]["content"] == "refunded 120 EUR on A7"
    assert again["model_saw"][-1]["content"] == "refunded 120 EUR on A7", "replayed, then"
    assert again["refunds"] == 1
    assert await refunds(harness, thread_id) == [{"order_id": "A7", "amount": 120}]

    # The token itself is used up: the store refuses it for this call.
    approval = await harness.store.get(request["approval_id"])
    tool_call = {"id": "refund-1", "name": "refund", "args": request["args"]}
    with pytest.raises(ApprovalAlreadyDecided):
        await harness.signoff().apply_resume(approval, token, tool_call, thread(thread_id))


@KINDS
async def test_sigkill_during_a_single_attempt_write_surfaces_outcome_unknown_not_a_rerun(
    harness: Harness, agents_url: str, kind: Kind
) -> None:
    thread_id = new_thread("sigkill", kind)
    await start(harness, kind, "refund", thread_id)
    [approval] = await harness.store.find(run_id=thread_id)
    await harness.store.decide(approval.approval_id, Decision.approve(), "alice")

    # A worker resumes the thread; the refund records its effect, then sleeps: kill it there.
    victim = await start_program(
        "tests.support.agent_workers",
        "resume",
        agents_url,
        kind.value,
        "refund",
        approval.approval_id,
        "continue",
        "--sleep",
        "60",
        "--lease",
        "1",
        env=kek_env(),
    )
    assert victim.stdout is not None
    line = await asyncio.wait_for(victim.stdout.readline(), 30)
    assert line.strip() == b"effect refund"
    victim.send_signal(signal.SIGKILL)
    await victim.wait()
    assert (await calls_of(harness.db, thread_id))["refund-1"]["status"] == "running"

    # A new process resumes the thread: the write may have happened, so it does not run again.
    successor = await resume_in_a_worker(agents_url, kind, approval.approval_id, "continue")
    result = tool_messages_of(successor)["refund-1"]
    assert result["status"] == "error"
    assert "outcome of the call to `refund` is unknown" in result["content"]
    assert "Do not call it again" in result["content"]
    assert successor["model_saw"][-1] == result, "the model read the error, then answered"
    assert successor["refunds"] == 1
    assert (await calls_of(harness.db, thread_id))["refund-1"]["status"] == "outcome_unknown"
    assert len(await refunds(harness, thread_id)) == 1


async def test_the_chat_user_who_asked_cannot_approve_their_own_request(harness: Harness) -> None:
    signoff = harness.signoff()
    run = f"self-{uuid.uuid4().hex[:8]}"
    config: RunnableConfig = {
        "configurable": {"thread_id": run, "signoff_requested_by": "slack:U42"}
    }
    call = {"name": "refund", "args": {"order_id": "A-1", "amount": 5}, "id": "c-self"}
    approval = await signoff.pending_approval(call, config)
    assert approval is not None and approval.requested_by == "slack:U42"
    with pytest.raises(DecisionNotAllowed, match="may not decide"):
        await harness.store.decide(approval.approval_id, Decision.approve(), "slack:U42")


async def test_a_replayed_resume_decision_is_a_duplicate_and_a_different_one_a_conflict(
    harness: Harness,
) -> None:
    signoff = harness.signoff()
    run = f"resume-{uuid.uuid4().hex[:8]}"
    config: RunnableConfig = {"configurable": {"thread_id": run, "signoff_reviewer": "alice"}}
    call = {"name": "refund", "args": {"order_id": "A-1", "amount": 5}, "id": "c-resume"}
    approval = await signoff.pending_approval(call, config)
    assert approval is not None
    reject = {"type": "reject", "message": "not this one"}
    first = await signoff.apply_resume(approval, reject, call, config)
    # LangGraph hands the same resume value to a node that runs again: nothing new recorded.
    again = await signoff.apply_resume(approval, reject, call, config)
    assert first.status is again.status is ApprovalStatus.REJECTED
    assert len(again.reviews) == 1
    with pytest.raises(DecisionConflict, match="already rejected"):
        await signoff.apply_resume(approval, {"type": "approve"}, call, config)
    assert (await harness.store.get(approval.approval_id)).status is ApprovalStatus.REJECTED
