"""Dex agent sessions when things go wrong: tools that are unknown, added at run time, fed
arguments that do not fit, or raising inside their bodies; a subgraph compiled with
`checkpointer=False`; a model that fails (the failed turn's note); turns the session refuses;
and Workers killed with SIGKILL inside a model call or a single-attempt tool (real OS
processes, `tests/support/dex_session_workers.py`). Every Step goes through the SDK's dispatcher
(`tests/support/dex_dispatch.py`) on the real database.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from dex import (
    AsyncClient,
    BlobCache,
)
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import START, StateGraph
from langgraph.prebuilt import tools_condition
from langgraph.types import interrupt
from pydantic import BaseModel

from adapters.dex import ToolCallRequest
from adapters.dex.sessions import (
    AgentSession,
    AgentSessionFlow,
    SessionClient,
    SessionEventType,
    SessionStart,
    TurnStep,
)
from adapters.langgraph import SignoffMiddleware, ToolSpec, signoff_tool_node
from ledger.calls.model import Effect

from .support.agents import (
    SCRIPTS,
    AgentState,
    Effects,
    Harness,
    Kind,
    ScriptedModel,
    build_agent,
    build_tools,
    calls,
    calls_of,
    effects_of,
)
from .support.dex_dispatch import Driver, Pending, SdkWorker
from .support.dex_session_workers import MODEL_CALLS, model_calls, session_flow
from .support.processes import kek_env, start_program
from .support.session_runs import (
    RECHECK,
    agent_session,
    blob_cache,
    new_session,
    session_harness,
    start,
)


@pytest.fixture(scope="module")
async def harness(database_url: str) -> AsyncIterator[Harness]:
    async with session_harness(database_url) as opened:
        yield opened


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[BlobCache]:
    with blob_cache(tmp_path) as opened:
        yield opened


# -- failure cases -----------------------------------------------------------------------------


class ArgsOf(BaseModel):
    order_id: str


def failing_tools(effects: Effects) -> list[BaseTool]:
    @tool
    async def inspect_order(order_id: str, config: RunnableConfig) -> str:
        """A read whose body raises a ValidationError."""
        await effects.record("inspect_order", {"order_id": order_id}, config)
        ArgsOf.model_validate({"order_id": 7})
        return "unreachable"

    @tool
    async def cancel_order(order_id: str, config: RunnableConfig) -> str:
        """A single-attempt write whose body raises a ValidationError."""
        await effects.record("cancel_order", {"order_id": order_id}, config)
        ArgsOf.model_validate({})
        return "unreachable"

    return [inspect_order, cancel_order]


MISTAKES = [
    calls(
        ("m-1", "teleport", {"to": "mars"}),
        ("m-2", "lookup_order", {"order": 7}),
        ("m-3", "inspect_order", {"order_id": "A7"}),
        ("m-4", "cancel_order", {"order_id": "A7"}),
        ("m-5", "gift_card", {"amount": 5}),
    ),
    AIMessage(content="Some of that did not work."),
]


class DynamicTools(AgentMiddleware):
    """Adds a tool to every model request (no tool node holds it)."""

    def __init__(self, added: BaseTool) -> None:
        super().__init__()
        self.added = added

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        return await handler(request.override(tools=[*request.tools, self.added]))


@pytest.mark.parametrize("kind", [Kind.BATCHED, Kind.GRAPH])
async def test_unknown_dynamic_and_failing_tools_each_record_their_outcome(
    harness: Harness, cache: BlobCache, kind: Kind
) -> None:
    effects = Effects(harness.db)

    @tool
    async def gift_card(amount: int, config: RunnableConfig) -> str:
        """A tool only middleware adds."""
        await effects.record("gift_card", {"amount": amount}, config)
        return f"gift card of {amount}"

    model = ScriptedModel(script=MISTAKES)
    tools = [*build_tools(effects), *failing_tools(effects)]
    signoff = harness.signoff(
        (
            ToolSpec("lookup_order", Effect.READ),
            ToolSpec("inspect_order", Effect.READ),
            ToolSpec("cancel_order", Effect.SINGLE_ATTEMPT),
            ToolSpec("gift_card", Effect.IDEMPOTENT_WRITE),
        )
    )
    if kind is Kind.GRAPH:
        graph = build_agent(kind, model, tools, signoff, harness.saver)
    else:
        graph = create_agent(
            model,
            tools=tools,
            middleware=[SignoffMiddleware(signoff), DynamicTools(gift_card)],
        )
    session = AgentSession(graph, harness.saver, signoff, tools=[gift_card])
    run = start(AgentSessionFlow(session, recheck_every=RECHECK), cache, model)
    await run.driver.run()
    assert run.driver.waiting() == ["AwaitUserMessage"]
    ledger = await calls_of(harness.db, run.session_id)
    assert {c: (e["status"], e["attempts"]) for c, e in ledger.items()} == {
        "m-1": ("failed", 1),  # no such tool
        "m-2": ("failed", 1),  # arguments that do not fit
        "m-3": ("failed", 3),  # a read: three attempts, then failed
        "m-4": ("outcome_unknown", 1),  # a write may have taken effect
        "m-5": ("succeeded", 1),  # the dynamic tool, from tools=
    }
    seen = {m.tool_call_id: m for m in model.seen[-1] if isinstance(m, ToolMessage)}
    assert "no tool named 'teleport'" in str(seen["m-1"].content)
    assert "do not fit lookup_order" in str(seen["m-2"].content)
    assert "unknown" in str(seen["m-4"].content)
    assert seen["m-5"].content == "gift card of 5"
    ran = [e["tool"] for e in await effects_of(harness.db, run.session_id)]
    assert sorted(ran) == ["cancel_order", "gift_card"] + ["inspect_order"] * 3


async def test_a_subgraph_without_checkpointer_fails_the_turn_before_any_tool_runs(
    harness: Harness, cache: BlobCache
) -> None:
    effects = Effects(harness.db)
    model = ScriptedModel(script=SCRIPTS["read"])
    tools = build_tools(effects)
    signoff = harness.signoff()

    async def call_model(state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"], config)]}

    inner = StateGraph(AgentState)
    inner.add_node("model", call_model)
    inner.add_node("tools", signoff_tool_node(tools, signoff))
    inner.add_edge(START, "model")
    inner.add_conditional_edges("model", tools_condition)
    inner.add_edge("tools", "model")
    outer = StateGraph(AgentState)
    outer.add_node("agent", inner.compile(checkpointer=False))
    outer.add_edge(START, "agent")
    session = AgentSession(outer.compile(), harness.saver, signoff, tools=tools, tool_nodes=())
    run = start(AgentSessionFlow(session, recheck_every=RECHECK), cache, model)
    await run.driver.run()
    assert run.driver.executed == ["StartAgentSession", "RunModel!", "FailTurn"]
    [failed] = run.events(SessionEventType.TURN_COMPLETED)
    assert failed.payload["status"] == "failed"
    assert "would run inside the graph" in failed.payload["error"]
    assert await effects_of(harness.db, run.session_id) == []
    assert await calls_of(harness.db, run.session_id) == {}
    run.say(close=True)
    await run.driver.run()
    assert run.output().status == "failed"


class FailsOnce(ScriptedModel):
    """Raises on its second model call of the first turn (as a provider outage would)."""

    broken: bool = True

    def reply(self, messages: list[BaseMessage]) -> AIMessage:
        turn = sum(isinstance(m, AIMessage) for m in messages)
        if turn == 1 and self.broken:
            raise RuntimeError("the model provider is down")
        return super().reply(messages)


async def test_a_failed_turn_leaves_a_note_so_the_model_does_not_repeat_a_write(
    harness: Harness, cache: BlobCache
) -> None:
    model = FailsOnce(script=SCRIPTS["refund"])
    specs = (ToolSpec("refund", Effect.SINGLE_ATTEMPT),)  # no approval
    signoff = harness.signoff(specs)
    graph = build_agent(
        Kind.BATCHED, model, build_tools(Effects(harness.db)), signoff, harness.saver
    )
    session = AgentSession(graph, harness.saver, signoff)
    run = start(AgentSessionFlow(session, recheck_every=RECHECK), cache, model)
    await run.driver.run()
    assert run.driver.executed == [
        "StartAgentSession",
        "RunModel",
        "CallTool",
        "ResumeTurn",
        "RunModel!",
        "FailTurn",
    ]
    [failed] = run.events(SessionEventType.TURN_COMPLETED)
    assert "the model provider is down" in failed.payload["error"]

    model.broken = False
    run.say("Did it work?")
    await run.driver.run()
    seen = model.seen[-1]
    note = [m for m in seen if isinstance(m, HumanMessage)][1]
    assert "do not make them again" in str(note.content)
    assert "refund (call refund-1): succeeded: refunded 120 EUR on A7" in str(note.content)
    assert len(await effects_of(harness.db, run.session_id, "refund")) == 1
    # Model providers refuse a conversation whose tool calls go unanswered: the failed turn's
    # calls are answered (their recorded outcomes) before the note, or every later turn fails.
    assert unanswered_calls(seen) == []
    [answer] = [m for m in seen if isinstance(m, ToolMessage)]
    assert (answer.tool_call_id, answer.content) == ("refund-1", "refunded 120 EUR on A7")


def unanswered_calls(messages: list[BaseMessage]) -> list[str]:
    """The ids of tool calls not answered by the ToolMessages right after their AI message
    (what model providers refuse)."""
    missing: list[str] = []
    for i, message in enumerate(messages):
        if isinstance(message, AIMessage) and message.tool_calls:
            answered: set[str] = set()
            for later in messages[i + 1 :]:
                if not isinstance(later, ToolMessage):
                    break
                answered.add(later.tool_call_id)
            missing += [str(c["id"]) for c in message.tool_calls if c["id"] not in answered]
    return missing


class Broken(ScriptedModel):
    """Raises on every model call while `broken` (a provider outage)."""

    broken: bool = False

    def reply(self, messages: list[BaseMessage]) -> AIMessage:
        if self.broken:
            raise RuntimeError("the model provider is down")
        return super().reply(messages)


async def test_a_turn_whose_first_model_call_failed_keeps_the_users_message(
    harness: Harness, cache: BlobCache
) -> None:
    """A later turn that fails before its model answered at all: what the user said in it
    stays in the conversation, so the next turn's model knows it was asked."""
    model = Broken(script=[*SCRIPTS["read"], AIMessage(content="B2 is on its way.")])
    graph = build_agent(
        Kind.GRAPH, model, build_tools(Effects(harness.db)), harness.signoff(), harness.saver
    )
    session = AgentSession(graph, harness.saver, harness.signoff())
    run = start(AgentSessionFlow(session, recheck_every=RECHECK), cache, model)
    await run.driver.run()
    model.broken = True
    run.say("And where is B2?")
    await run.driver.run()
    assert [e.payload["status"] for e in run.events(SessionEventType.TURN_COMPLETED)] == [
        "completed",
        "failed",
    ]
    model.broken = False
    run.say("Hello?")
    await run.driver.run()
    said = [m.content for m in model.seen[-1] if isinstance(m, HumanMessage)]
    assert said == ["Please help", "And where is B2?", "Hello?"]
    assert unanswered_calls(model.seen[-1]) == []


def self_interrupting_graph(harness: Harness, model: ScriptedModel) -> Any:
    """A StateGraph whose model node asks a person itself, with `interrupt()`."""
    signoff = harness.signoff()

    async def call_model(state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        interrupt({"question": "may I answer?"})
        return {"messages": [await model.ainvoke(state["messages"], config)]}

    graph = StateGraph(AgentState)
    graph.add_node("model", call_model)
    graph.add_node("tools", signoff_tool_node(build_tools(Effects(harness.db)), signoff))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    return graph.compile()


@pytest.mark.parametrize("case", ["own interrupt", "repeated call id"])
async def test_a_turn_the_session_cannot_go_on_with_fails_before_any_tool_runs(
    harness: Harness, cache: BlobCache, case: str
) -> None:
    signoff = harness.signoff()
    if case == "own interrupt":
        model = ScriptedModel(script=SCRIPTS["read"])
        graph = self_interrupting_graph(harness, model)
        expected = "interrupt of its own"
    else:
        model = ScriptedModel(script=SCRIPTS["mistakes"])
        tools = build_tools(Effects(harness.db))
        graph = build_agent(Kind.GRAPH, model, tools, signoff, harness.saver)
        expected = "ids must be non-empty and unique"
    session = AgentSession(graph, harness.saver, signoff)
    run = start(AgentSessionFlow(session, recheck_every=RECHECK), cache, model)
    await run.driver.run()
    assert run.driver.executed == ["StartAgentSession", "RunModel!", "FailTurn"]
    [failed] = run.events(SessionEventType.TURN_COMPLETED)
    assert expected in failed.payload["error"]
    assert await calls_of(harness.db, run.session_id) == {}
    assert await effects_of(harness.db, run.session_id) == []


@pytest.mark.parametrize("args", [{"order_id": "B2"}, {"order_id": "A7"}])
async def test_a_call_id_the_session_used_before_fails_the_turn_and_runs_nothing(
    harness: Harness, cache: BlobCache, args: dict[str, Any]
) -> None:
    """The ledger keeps one entry per (session, call id): a model that gives a later call an
    id of an earlier one (other arguments, or the same) must not get the earlier result
    replayed, nor leave the turn waiting for a call that never settles."""
    script = [
        calls(("c-1", "lookup_order", {"order_id": "A7"})),
        AIMessage(content="Order A7 was delivered."),
        calls(("c-1", "lookup_order", args)),
        AIMessage(content="Order B2 is on its way."),
    ]
    flow, model = agent_session(harness, Kind.GRAPH, script)
    run = start(flow, cache, model)
    await run.driver.run()
    run.say("And B2?")
    await run.driver.run()
    assert run.driver.waiting() == ["AwaitUserMessage"]
    first, second = run.events(SessionEventType.TURN_COMPLETED)
    assert (first.payload["status"], second.payload["status"]) == ("completed", "failed")
    assert "used before" in second.payload["error"]
    assert len(await effects_of(harness.db, run.session_id, "lookup_order")) == 1


# -- real processes ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def model_calls_table(harness: Harness) -> None:
    async with harness.db.connection() as conn:
        await conn.execute(MODEL_CALLS)


async def killed_after(program: asyncio.subprocess.Process, line: bytes) -> None:
    """SIGKILL `program` once it printed `line` (it is then inside the model or the tool)."""
    assert program.stdout is not None
    while (await asyncio.wait_for(program.stdout.readline(), 60)).strip() != line:
        pass
    program.send_signal(signal.SIGKILL)
    await program.wait()


def program(*args: str) -> Any:
    return start_program("tests.support.dex_session_workers", *args, env=kek_env())


@pytest.mark.usefixtures("model_calls_table")
async def test_sigkill_during_run_model_reruns_only_that_model_call(
    harness: Harness, cache: BlobCache, database_url: str
) -> None:
    session_id = new_session()
    flow, _ = session_flow(harness, session_id, "read")
    driver = Driver(SdkWorker(flow, cache), session_id)
    driver.start("StartAgentSession", SessionStart("Where is A7?", "carol"))
    for step in ("StartAgentSession", "RunModel", "CallTool", "ResumeTurn"):
        await driver.run(only=step)
    assert driver.waiting() == ["RunModel"]  # the lookup ran; the second model call is next

    [resume] = driver.pending
    at = driver.worker.decode(resume.input, TurnStep).checkpoint_id
    assert at is not None, "RunModel goes on from the checkpoint its input names"
    await killed_after(
        await program("run-model", database_url, session_id, "1", at, "yes"), b"model"
    )
    # Dex gives the Step to another Worker (this process): the model call runs again.
    await driver.run()
    assert driver.waiting() == ["AwaitUserMessage"]

    calls = await model_calls(harness.db, session_id)
    assert [turn for turn, _ in calls] == [0, 1, 1], "the killed model call, and only it, again"
    assert len({pid for _, pid in calls[1:]}) == 2
    assert len(await effects_of(harness.db, session_id, "lookup_order")) == 1
    sessions = SessionClient(cast(AsyncClient, None), flow, harness.store, harness.saver)
    snapshot = await sessions.snapshot(session_id)
    assert [m.role for m in snapshot.messages] == ["user", "assistant", "tool", "assistant"]
    assert snapshot.messages[-1].text == "Order A7 was delivered."


async def test_sigkill_during_a_single_attempt_tool_step_records_outcome_unknown(
    harness: Harness, cache: BlobCache, database_url: str
) -> None:
    session_id = new_session()
    flow, model = session_flow(harness, session_id, "refund")
    driver = Driver(SdkWorker(flow, cache), session_id)
    driver.start("StartAgentSession", SessionStart("Refund A7", "carol"))
    for step in ("StartAgentSession", "RunModel"):
        await driver.run(only=step)
    [call] = [p for p in driver.pending if p.step == "CallTool"]
    request = driver.worker.decode(call.input, ToolCallRequest)
    assert request.checkpoint_id is not None and request.args == {}

    victim = await program("call", database_url, session_id, request.call_id, request.checkpoint_id)
    await killed_after(victim, b"effect refund")
    # CallTool had its one attempt: Dex moves the call to SettleToolCall on another Worker.
    driver.pending.remove(call)
    driver.pending.append(Pending("SettleToolCall", call.input))
    await driver.run()
    assert driver.waiting() == ["AwaitUserMessage"]

    [entry] = (await calls_of(harness.db, session_id)).values()
    assert (entry["status"], entry["attempts"]) == ("outcome_unknown", 1)
    assert len(await effects_of(harness.db, session_id, "refund")) == 1, "not run again"
    [result] = [m for m in model.seen[-1] if isinstance(m, ToolMessage)]
    assert result.status == "error" and "unknown" in str(result.content)


async def test_a_checkpoint_that_sorts_last_does_not_derail_the_session(
    harness: Harness, cache: BlobCache
) -> None:
    """Checkpoint ids follow the writing Worker's clock: one written by a Worker whose clock
    runs ahead sorts as the thread's latest. The session goes on from the checkpoints Dex
    names, so it is never read."""
    flow, model = agent_session(harness, Kind.BATCHED, "read")
    run = start(flow, cache, model, "Where is A7?")
    for step in ("StartAgentSession", "RunModel", "CallTool"):
        await run.driver.run(only=step)
    stray = empty_checkpoint()
    stray["id"] = "ffffffff-ffff-6fff-8fff-ffffffffffff"  # after every real id
    thread: RunnableConfig = {"configurable": {"thread_id": run.session_id, "checkpoint_ns": ""}}
    await harness.saver.aput(thread, stray, {"source": "update", "step": 99}, {})
    await run.driver.run()
    assert run.driver.waiting() == ["AwaitUserMessage"]
    assert [type(m).__name__ for m in model.seen[-1]] == [
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
    ]
    [done] = run.events(SessionEventType.TURN_COMPLETED)
    sessions = SessionClient(cast(AsyncClient, None), flow, harness.store, harness.saver)
    at = await sessions.snapshot(run.session_id, done.payload["checkpoint_id"])
    assert at.messages[-1].text == "Order A7 was delivered."
    assert (await sessions.snapshot(run.session_id)).messages == [], "the stray one is latest"
