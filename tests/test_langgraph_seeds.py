"""`tool_task` / `fan_out` and `one_use` against LangGraph's re-run-from-the-top behaviour: real
StateGraphs, encrypted checkpoints on real PostgreSQL, the graphs on a worker's login (only
`signoff_app`), decisions made by the owner's store, and resumes in other OS processes.

What runs is counted in a side-effect file (`tests.support.seed_graphs.Runs`): entries into nodes
(LangGraph re-ran them) and the tools and steps inside them (Signoff ran those once)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command

from adapters.langgraph import (
    InvalidSend,
    OutsideOneUse,
    fan_out,
    signoff_tool_node,
    step,
    tool_task,
)
from adapters.langgraph.tools import tool_message
from adapters.runtime import ToolSpec
from approvals import ApprovalPolicy, ApprovalStatus, Decision
from ledger.calls.model import CallOutcome, CallStatus, Effect
from ledger.errors import InvalidToolCall
from ledger.keys import LocalKek, Purpose
from ledger.store.logins import temporary_login
from tests.support.directory import list_reviewers
from tests.support.scratch import scratch_database

from .support.agents import Graph, Harness, calls_of, open_harness, thread
from .support.processes import TEST_KEK, finish, kek_env, start_program
from .support.seed_graphs import (
    ORDERS,
    REFUNDS,
    SPECS,
    FanState,
    Runs,
    build_tools,
    fan_out_graph,
    settle_graph,
    two_questions_graph,
)


@pytest.fixture(scope="module")
async def owner_url(server_url: str) -> AsyncIterator[str]:
    async with scratch_database(server_url, prefix="signoff_seeds") as url:
        await list_reviewers(url)
        yield url


@pytest.fixture(scope="module")
async def owner(owner_url: str) -> AsyncIterator[Harness]:
    """The owner's side (it made the data keys): decides approvals, reads the ledger."""
    async with open_harness(owner_url, LocalKek(TEST_KEK)) as opened:
        yield opened


@pytest.fixture(scope="module")
async def worker_url(owner_url: str, owner: Harness) -> AsyncIterator[str]:
    async with temporary_login(owner_url, "signoff_app") as url:
        yield url


@pytest.fixture(scope="module")
async def worker(worker_url: str) -> AsyncIterator[Harness]:
    """An agent worker: a login with only `signoff_app`."""
    async with open_harness(worker_url, LocalKek(TEST_KEK)) as opened:
        yield opened


def new_thread(what: str) -> str:
    return f"{what}-{uuid.uuid4().hex[:8]}"


async def resume_elsewhere(url: str, graph: str, thread_id: str, runs: Runs) -> dict[str, Any]:
    """`tests.support.seed_workers` resumes the thread in its own process; what it printed."""
    process = await start_program(
        "tests.support.seed_workers", url, graph, thread_id, str(runs.path), env=kek_env()
    )
    result: dict[str, Any] = json.loads((await finish(process, within=60)).splitlines()[-1])
    return result


async def checkpoint_before(graph: Graph, config: RunnableConfig, node: str) -> RunnableConfig:
    """The latest checkpoint about to run `node`: invoking from it runs that superstep again
    (a retry, a replay)."""
    async for snapshot in graph.aget_state_history(config):
        if node in snapshot.next:
            return snapshot.config
    raise AssertionError(f"no checkpoint before {node}")


# -- tool_task and fan_out -----------------------------------------------------------------


async def test_a_fan_out_resumed_in_another_process_runs_each_call_once(
    owner: Harness, worker: Harness, worker_url: str, tmp_path: Path
) -> None:
    runs = Runs(tmp_path / "runs.jsonl")
    thread_id = new_thread("fan")
    graph = fan_out_graph(runs, worker.signoff(SPECS), worker.saver)

    out = await graph.ainvoke({"orders": ORDERS, "refunds": REFUNDS}, thread(thread_id))
    [pause] = out["__interrupt__"]
    assert pause.value["type"] == "tool_approval"
    assert (pause.value["tool_call_id"], pause.value["args"]) == (
        "refund-A7",
        {"order_id": "A7", "amount": 120},
    ), "the explicit call id, and the arguments without it"
    assert runs.counts() == {
        "enter lookup": 2,
        "enter refund": 1,
        "lookup_order A7": 1,
        "lookup_order B2": 1,
    }
    await owner.store.decide(pause.value["approval_id"], Decision.approve(), "alice")

    resumed = await resume_elsewhere(worker_url, "fan-out", thread_id, runs)
    assert resumed["pid"] != os.getpid() and resumed["paused"] is False
    expected = [
        "order A7: delivered",
        "order B2: delivered",
        "refunded 120 EUR on A7",
    ]
    assert sorted(m["content"] for m in resumed["values"]["results"]) == expected
    assert runs.pids("refund A7") == [resumed["pid"]], "the approved call ran once, there"
    ledger = await calls_of(owner.db, thread_id)
    assert sorted((v["tool"], v["status"]) for v in ledger.values()) == [
        ("lookup_order", "succeeded"),
        ("lookup_order", "succeeded"),
        ("refund", "succeeded"),
    ]
    derived = sorted(i for i in ledger if i != "refund-A7")
    assert all(
        i.startswith("lookup_order:") and len(i) == len("lookup_order:") + 32 for i in derived
    )
    approval = await owner.store.get(pause.value["approval_id"])
    assert approval.consumed_by == f"{thread_id}/refund-A7"

    # The superstep again, from the checkpoint before it: LangGraph runs every task again, the
    # ledger replays each call.
    before = await checkpoint_before(graph, thread(thread_id), "lookup")
    again = await graph.ainvoke(None, before)
    assert sorted(str(m.content) for m in again["results"]) == expected
    counts = runs.counts()
    assert {k: v for k, v in counts.items() if not k.startswith("enter")} == {
        "lookup_order A7": 1,
        "lookup_order B2": 1,
        "refund A7": 1,
    }
    assert (counts["enter lookup"], counts["enter refund"]) == (4, 3), "LangGraph ran them again"
    assert await calls_of(owner.db, thread_id) == ledger


async def test_a_derived_call_id_survives_a_key_rotation(
    owner: Harness, worker: Harness, tmp_path: Path
) -> None:
    runs = Runs(tmp_path / "runs.jsonl")
    thread_id = new_thread("fan-rotate")
    graph = fan_out_graph(runs, worker.signoff(SPECS), worker.saver)
    out = await graph.ainvoke({"orders": ORDERS, "refunds": []}, thread(thread_id))
    recorded = await calls_of(owner.db, thread_id)
    assert len(recorded) == 2

    # The value-MAC key the ids were derived under becomes decrypt-only; a replay of the
    # fan-out derives new ids under the new key, but finds the calls under the old ones.
    await owner.ring.rotate(Purpose.VALUE_MAC)
    await worker.ring.refresh()
    again = await graph.ainvoke(None, await checkpoint_before(graph, thread(thread_id), "lookup"))
    assert [m.content for m in again["results"]] == [m.content for m in out["results"]]
    assert runs.counts()["enter lookup"] == 4
    assert (runs.counts()["lookup_order A7"], runs.counts()["lookup_order B2"]) == (1, 1)
    assert await calls_of(owner.db, thread_id) == recorded


async def test_a_paused_send_keeps_its_approval_across_a_key_rotation(
    owner: Harness, worker: Harness, tmp_path: Path
) -> None:
    runs = Runs(tmp_path / "runs.jsonl")
    thread_id = new_thread("fan-rotate-paused")
    graph = fan_out_graph(runs, worker.signoff(SPECS), worker.saver)
    derived = [{"order_id": "B2", "amount": 30}]  # no call_id: derived
    out = await graph.ainvoke({"orders": [], "refunds": derived}, thread(thread_id))
    [pause] = out["__interrupt__"]
    await owner.ring.rotate(Purpose.VALUE_MAC)
    await worker.ring.refresh()
    await owner.store.decide(pause.value["approval_id"], Decision.approve(), "alice")

    out = await graph.ainvoke(Command(resume="continue"), thread(thread_id))
    assert [m.content for m in out["results"]] == ["refunded 30 EUR on B2"]
    assert len(await owner.store.find(run_id=thread_id)) == 1, "not asked again"
    assert list(await calls_of(owner.db, thread_id)) == [pause.value["tool_call_id"]]


async def test_a_send_whose_process_died_mid_call_is_not_run_again(
    owner: Harness, worker: Harness, worker_url: str, tmp_path: Path
) -> None:
    runs = Runs(tmp_path / "runs.jsonl")
    thread_id = new_thread("fan-crash")
    graph = fan_out_graph(runs, worker.signoff(SPECS), worker.saver)
    out = await graph.ainvoke({"orders": ORDERS, "refunds": REFUNDS}, thread(thread_id))
    [pause] = out["__interrupt__"]
    await owner.store.decide(pause.value["approval_id"], Decision.approve(), "alice")

    # A worker resumes; the refund records its run, then sleeps: kill the worker there.
    victim = await start_program(
        "tests.support.seed_workers",
        *(worker_url, "fan-out", thread_id, str(runs.path), "60", "1"),
        env=kek_env(),
    )
    assert victim.stdout is not None
    assert (await asyncio.wait_for(victim.stdout.readline(), 30)).strip() == b"effect refund"
    victim.send_signal(signal.SIGKILL)
    await victim.wait()

    # LangGraph runs the refund task again in the next process; the ledger says the write may
    # have happened, so the tool does not run again and the task reports an unknown outcome.
    resumed = await resume_elsewhere(worker_url, "fan-out", thread_id, runs)
    [refunded] = [m for m in resumed["values"]["results"] if "refund" in m["content"]]
    assert refunded["status"] == "error" and "is unknown" in refunded["content"]
    assert runs.pids("refund A7") == [victim.pid]
    assert (await calls_of(owner.db, thread_id))["refund-A7"]["status"] == "outcome_unknown"
    assert (runs.counts()["lookup_order A7"], runs.counts()["lookup_order B2"]) == (1, 1)


async def test_a_rejected_send_reaches_its_state_key_as_an_error_message(
    owner: Harness, worker: Harness, tmp_path: Path
) -> None:
    runs = Runs(tmp_path / "runs.jsonl")
    thread_id = new_thread("fan-reject")
    graph = fan_out_graph(runs, worker.signoff(SPECS), worker.saver)
    out = await graph.ainvoke({"orders": [], "refunds": REFUNDS}, thread(thread_id))
    [pause] = out["__interrupt__"]
    await owner.store.decide(pause.value["approval_id"], Decision.reject("not this one"), "alice")

    out = await graph.ainvoke(Command(resume="continue"), thread(thread_id))
    [message] = out["results"]
    assert isinstance(message, ToolMessage) and message.status == "error"
    assert "rejected the call to `refund`: not this one" in str(message.content)
    assert "refund A7" not in runs.counts()
    assert (await calls_of(owner.db, thread_id))["refund-A7"]["status"] == "denied"


async def test_content_blocks_stay_content_blocks(worker: Harness) -> None:
    blocks = [
        {"type": "text", "text": "the invoice"},
        {"type": "file", "base64": "JVBERi0xLjQK", "mime_type": "application/pdf"},
    ]

    @tool
    async def invoice(order_id: str) -> list[dict[str, Any]]:
        """The invoice of an order, as a file."""
        return blocks

    graph = StateGraph(FanState)
    graph.add_node("plan", lambda state: {})
    graph.add_node("invoice", tool_task(invoice, worker.signoff(SPECS), into="results"))
    graph.add_edge(START, "plan")
    graph.add_conditional_edges("plan", fan_out("invoice", "orders"), ["invoice"])
    graph.add_edge("invoice", END)
    app = graph.compile(checkpointer=worker.saver)
    config = thread(new_thread("blocks"))

    out = await app.ainvoke({"orders": [{"order_id": "A7"}]}, config)
    assert [m.content for m in out["results"]] == [blocks], "not a JSON string"
    replayed = await app.ainvoke(None, await checkpoint_before(app, config, "invoice"))
    assert [m.content for m in replayed["results"]] == [blocks]
    # The tool node hands them on as they are too.
    node = StateGraph(MessagesState)
    node.add_node("tools", signoff_tool_node([invoice], worker.signoff(SPECS)))
    node.add_edge(START, "tools")
    node.add_edge("tools", END)
    asked = AIMessage("", tool_calls=[{"name": "invoice", "args": {"order_id": "A7"}, "id": "i1"}])
    answered = await node.compile(checkpointer=worker.saver).ainvoke(
        {"messages": [asked]}, thread(new_thread("blocks-node"))
    )
    assert answered["messages"][-1].content == blocks, "not a JSON string"
    # A list that is not content blocks is still JSON text.
    numbers = CallOutcome(CallStatus.SUCCEEDED, "c1", result=[1, 2])
    assert tool_message(numbers, {"name": "count", "id": "c1"}).content == "[1, 2]"


async def test_a_models_tool_calls_sent_one_by_one_run_under_the_models_ids(
    worker: Harness, tmp_path: Path
) -> None:
    runs = Runs(tmp_path / "runs.jsonl")
    lookup_order, _ = build_tools(runs)
    message = AIMessage(
        content="",
        tool_calls=[
            {"id": "m-1", "name": "lookup_order", "args": {"order_id": "A7"}},
            {"id": "m-2", "name": "lookup_order", "args": {"order_id": "A7"}},
        ],
    )

    def each_call(state: FanState) -> list[dict[str, Any]]:
        return [dict(c) for c in message.tool_calls]

    graph = StateGraph(FanState)
    graph.add_node("plan", lambda state: {})
    graph.add_node("lookup", tool_task(lookup_order, worker.signoff(SPECS), into="results"))
    graph.add_edge(START, "plan")
    graph.add_conditional_edges("plan", fan_out("lookup", each_call), ["lookup"])
    graph.add_edge("lookup", END)
    app = graph.compile(checkpointer=worker.saver)
    thread_id = new_thread("model-calls")

    out = await app.ainvoke({}, thread(thread_id))
    assert sorted(m.tool_call_id for m in out["results"]) == ["m-1", "m-2"]
    assert runs.counts() == {"lookup_order A7": 2}, "two calls of the model, the same arguments"
    await app.ainvoke(None, await checkpoint_before(app, thread(thread_id), "lookup"))
    assert runs.counts() == {"lookup_order A7": 2}
    assert sorted(await calls_of(worker.db, thread_id)) == ["m-1", "m-2"]


# -- one_use -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["async", "sync"])
@pytest.mark.parametrize("decision", ["approve", "reject"])
async def test_a_one_use_node_resumed_in_another_process_does_each_step_once(
    owner: Harness, worker: Harness, worker_url: str, tmp_path: Path, kind: str, decision: str
) -> None:
    runs = Runs(tmp_path / "runs.jsonl")
    thread_id = new_thread(f"settle-{kind}-{decision}")
    graph = settle_graph(kind, runs, worker.signoff(SPECS), worker.saver)

    out = await graph.ainvoke({"order_id": "A7"}, thread(thread_id))
    [pause] = out["__interrupt__"]
    paused = (await graph.aget_state(thread(thread_id))).config
    assert (pause.value["name"], pause.value["args"]) == (
        "refund",
        {"order_id": "A7", "amount": 120},
    )
    assert runs.counts() == {"enter settle": 1, "draft": 1}
    verdict = Decision.approve() if decision == "approve" else Decision.reject("no refunds")
    await owner.store.decide(pause.value["approval_id"], verdict, "alice")

    resumed = await resume_elsewhere(worker_url, f"settle-{kind}", thread_id, runs)
    assert resumed["pid"] != os.getpid() and resumed["paused"] is False
    counts = runs.counts()
    assert (counts["enter settle"], counts["draft"]) == (2, 1), "re-run from the top; drafted once"
    ledger = await calls_of(owner.db, thread_id)
    by_tool = {v["tool"]: v["status"] for v in ledger.values()}
    if decision == "approve":
        assert resumed["values"]["notes"] == ["draft for A7", "paid 120 EUR on A7"]
        assert runs.pids("pay") == [resumed["pid"]]
        assert by_tool == {
            "draft": "succeeded",
            "refund": "succeeded",
            "pay": "succeeded",
            "signoff.pause": "succeeded",
        }
    else:
        assert resumed["values"]["notes"] == ["draft for A7", "skipped: denied"]
        assert counts["pay"] == 0, "a rejection skips the rest"
        assert by_tool == {"draft": "succeeded", "refund": "denied", "signoff.pause": "succeeded"}
    approval = await owner.store.get(pause.value["approval_id"])
    assert approval.consumed_by == f"{thread_id}/{pause.value['tool_call_id']}"

    # The paused checkpoint resumed again (a retry, a second resume of the same pause): the
    # same task run, so every step is replayed and nothing new is asked.
    again = await graph.ainvoke(Command(resume="continue"), paused)
    assert again["notes"] == resumed["values"]["notes"]
    counts = runs.counts()
    assert (counts["enter settle"], counts["draft"], counts["pay"]) == (
        3,
        1,
        1 if decision == "approve" else 0,
    )
    assert len(await owner.store.find(run_id=thread_id)) == 1


async def test_a_one_use_node_whose_process_died_mid_step_does_not_run_it_again(
    owner: Harness, worker: Harness, worker_url: str, tmp_path: Path
) -> None:
    runs = Runs(tmp_path / "runs.jsonl")
    thread_id = new_thread("settle-crash")
    graph = settle_graph("async", runs, worker.signoff(SPECS), worker.saver)
    [pause] = (await graph.ainvoke({"order_id": "A7"}, thread(thread_id)))["__interrupt__"]
    await owner.store.decide(pause.value["approval_id"], Decision.approve(), "alice")

    victim = await start_program(
        "tests.support.seed_workers",
        *(worker_url, "settle-async", thread_id, str(runs.path), "60", "1"),
        env=kek_env(),
    )
    assert victim.stdout is not None
    assert (await asyncio.wait_for(victim.stdout.readline(), 30)).strip() == b"effect pay"
    victim.send_signal(signal.SIGKILL)
    await victim.wait()

    # The next process re-runs the node from the top: the draft is replayed, the approval is
    # not asked for again, and the payment, which may have happened, is not made again.
    resumed = await resume_elsewhere(worker_url, "settle-async", thread_id, runs)
    assert resumed["values"]["notes"] == ["draft for A7", "not paid: outcome_unknown"]
    counts = runs.counts()
    assert (counts["enter settle"], counts["draft"], counts["pay"]) == (3, 1, 1)
    statuses = {v["tool"]: v["status"] for v in (await calls_of(owner.db, thread_id)).values()}
    assert statuses["pay"] == "outcome_unknown"
    assert len(await owner.store.find(run_id=thread_id)) == 1


async def test_an_edited_answer_reaches_the_next_step(owner: Harness, tmp_path: Path) -> None:
    runs = Runs(tmp_path / "runs.jsonl")
    config: RunnableConfig = {
        "configurable": {"thread_id": new_thread("edit"), "signoff_reviewer": "alice"}
    }
    graph = settle_graph("async", runs, owner.signoff(SPECS), owner.saver)
    await graph.ainvoke({"order_id": "A7"}, config)
    edit = {
        "type": "edit",
        "edited_action": {"name": "refund", "args": {"order_id": "A7", "amount": 60}},
    }
    out = await graph.ainvoke(Command(resume=edit), config)
    assert out["notes"] == ["draft for A7", "paid 60 EUR on A7"]
    assert runs.counts() == {"enter settle": 2, "draft": 1, "pay": 1}


async def test_each_answer_goes_to_its_own_question_when_a_node_asks_twice(
    owner: Harness, tmp_path: Path
) -> None:
    # Resume values are positional in LangGraph: without the recorded pauses, the node's
    # re-run would skip the decided refund's pause and hand its "approve" to the discount.
    runs = Runs(tmp_path / "runs.jsonl")
    thread_id = new_thread("two")
    config: RunnableConfig = {"configurable": {"thread_id": thread_id, "signoff_reviewer": "alice"}}
    graph = two_questions_graph(runs, owner.signoff(SPECS), owner.saver)

    out = await graph.ainvoke({"order_id": "A7"}, config)
    [first] = out["__interrupt__"]
    assert first.value["name"] == "refund"
    out = await graph.ainvoke(Command(resume={"type": "approve"}), config)
    [second] = out["__interrupt__"]
    assert second.value["name"] == "discount"
    out = await graph.ainvoke(Command(resume={"type": "reject", "message": "no"}), config)

    assert out["notes"] == ["succeeded", "denied"]
    assert (await owner.store.get(first.value["approval_id"])).status is ApprovalStatus.APPROVED
    assert (await owner.store.get(second.value["approval_id"])).status is ApprovalStatus.REJECTED
    assert runs.counts() == {"enter offer": 3}


async def test_fan_out_sends_only_mappings(worker: Harness, tmp_path: Path) -> None:
    graph = fan_out_graph(Runs(tmp_path / "runs.jsonl"), worker.signoff(SPECS), worker.saver)
    with pytest.raises(InvalidSend, match="mappings, not str"):
        await graph.ainvoke({"orders": ["A7"], "refunds": []}, thread(new_thread("bad")))


async def test_a_step_outside_a_one_use_node_is_refused_before_it_runs(tmp_path: Path) -> None:
    runs = Runs(tmp_path / "runs.jsonl")
    with pytest.raises(OutsideOneUse, match="one_use"):
        await step("draft", lambda: runs.add("draft"))
    # A name like a pause record's would replay a pause that was never asked.
    with pytest.raises(InvalidToolCall, match="without '#'"):
        await step("draft#pause-0", lambda: runs.add("draft"))
    assert runs.counts() == {}


# -- store-only: a resume value never decides an approval whose policy names approvers -------

GUARDED = (
    ToolSpec("lookup_order", effect=Effect.READ),
    ToolSpec("refund", approval=ApprovalPolicy(approvers=frozenset({"alice"}))),
    ToolSpec("discount", approval=ApprovalPolicy(approvers=frozenset({"alice"}))),
)


async def test_a_send_under_named_approvers_is_not_decided_by_a_resume_value(
    owner: Harness, tmp_path: Path
) -> None:
    # The config names the reviewer; the caller chose it, so only the store may decide.
    runs = Runs(tmp_path / "runs.jsonl")
    config: RunnableConfig = {
        "configurable": {"thread_id": new_thread("fan-only"), "signoff_reviewer": "alice"}
    }
    graph = fan_out_graph(runs, owner.signoff(GUARDED), owner.saver)
    out = await graph.ainvoke({"orders": [], "refunds": REFUNDS}, config)
    [pause] = out["__interrupt__"]

    out = await graph.ainvoke(Command(resume={"type": "approve"}), config)
    [again] = out["__interrupt__"]
    assert "decided in Signoff's store only" in again.value["refused"]
    assert (await owner.store.get(pause.value["approval_id"])).status is ApprovalStatus.PENDING
    assert "refund A7" not in runs.counts()

    await owner.store.decide(pause.value["approval_id"], Decision.approve(), "alice")
    out = await graph.ainvoke(Command(resume="continue"), config)
    assert runs.counts()["refund A7"] == 1


async def test_a_one_use_ask_under_named_approvers_is_not_decided_by_a_resume_value(
    owner: Harness, tmp_path: Path
) -> None:
    runs = Runs(tmp_path / "runs.jsonl")
    config: RunnableConfig = {
        "configurable": {"thread_id": new_thread("two-only"), "signoff_reviewer": "alice"}
    }
    graph = two_questions_graph(runs, owner.signoff(GUARDED), owner.saver)
    out = await graph.ainvoke({"order_id": "A7"}, config)
    [first] = out["__interrupt__"]

    out = await graph.ainvoke(Command(resume={"type": "approve"}), config)
    [again] = out["__interrupt__"]
    assert again.value["name"] == "refund"
    assert "decided in Signoff's store only" in again.value["refused"]
    assert (await owner.store.get(first.value["approval_id"])).status is ApprovalStatus.PENDING

    await owner.store.decide(first.value["approval_id"], Decision.approve(), "alice")
    out = await graph.ainvoke(Command(resume="continue"), config)
    [second] = out["__interrupt__"]
    assert second.value["name"] == "discount" and "refused" not in second.value


async def test_a_derived_call_id_is_the_same_in_a_process_that_has_not_seen_a_rotation(
    owner: Harness, worker: Harness, tmp_path: Path
) -> None:
    # The owner rotates and runs the fan-out under the new key; the worker's cache is within
    # its refresh interval, so it still takes the old key for the active one.
    runs = Runs(tmp_path / "runs.jsonl")
    thread_id = new_thread("fan-stale")
    await worker.ring.refresh()
    interval, worker.ring.refresh_seconds = worker.ring.refresh_seconds, 3600.0
    try:
        await owner.ring.rotate(Purpose.VALUE_MAC)
        mine = fan_out_graph(runs, owner.signoff(SPECS), owner.saver)
        await mine.ainvoke({"orders": ORDERS, "refunds": []}, thread(thread_id))
        recorded = await calls_of(owner.db, thread_id)

        theirs = fan_out_graph(runs, worker.signoff(SPECS), worker.saver)
        await theirs.ainvoke(None, await checkpoint_before(theirs, thread(thread_id), "lookup"))
    finally:
        worker.ring.refresh_seconds = interval
    assert (runs.counts()["lookup_order A7"], runs.counts()["lookup_order B2"]) == (1, 1)
    assert await calls_of(owner.db, thread_id) == recorded
