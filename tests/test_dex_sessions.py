"""Dex agent sessions: a create_agent agent (with `SignoffMiddleware`) and a custom StateGraph
(with `signoff_tool_node`) run as `AgentSessionFlow`s, validated in a real `dex.Registry`, every
Step through the SDK's own dispatcher and codecs (`tests/support/dex_dispatch.py`: the server is
played by `Driver`, which runs each movement the Steps return), on the real database with the
encrypted checkpointer; crashes with real OS processes and SIGKILL; end to end on a live Dex
server when `DEX_SERVER_ADDRESS` is set.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import pytest
from dex import (
    AsyncClient,
    AsyncWorker,
    BlobCache,
    BlobCacheConfig,
    ClientOptions,
    DexServiceError,
    LongPollTimeoutError,
    PullWorkerOptions,
    Registry,
    WorkerOptions,
    open_blob_cache,
)
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, tool
from langgraph.graph import START, StateGraph
from langgraph.prebuilt import tools_condition
from langgraph.types import interrupt
from pydantic import BaseModel

from adapters.dex import DecideRequest, ToolCallRequest
from adapters.dex.sessions import (
    SEND_MESSAGE_RPC,
    USER_MESSAGES,
    AgentSession,
    AgentSessionFlow,
    SessionClient,
    SessionEvent,
    SessionEventType,
    SessionGraphRefused,
    SessionResult,
    SessionStart,
    TurnStep,
    UserMessage,
)
from adapters.langgraph import SignoffMiddleware, ToolSpec, signoff_tool_node
from approvals import ApprovalStatus, ApprovalStore, Decision
from ledger.calls.model import Effect
from ledger.errors import EventNotPermitted
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.logins import temporary_login

from .agents import (
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
    create_effects_table,
    effects_of,
    open_harness,
)
from .dex_session_workers import MODEL_CALLS, model_calls, session_flow
from .processes import TEST_KEK, finish, kek_env, run_cli, start_program
from .support.dex_dispatch import Driver, Pending, SdkWorker
from .support.scratch import scratch_database

DEX_SERVER_ADDRESS = os.environ.get("DEX_SERVER_ADDRESS", "")
RECHECK = timedelta(seconds=30)


@pytest.fixture(scope="module")
async def harness(database_url: str) -> AsyncIterator[Harness]:
    async with open_harness(database_url, LocalKek(TEST_KEK), lease_seconds=1.0) as opened:
        await create_effects_table(opened.db)
        yield opened


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[BlobCache]:
    blob_cache = open_blob_cache(BlobCacheConfig(str(tmp_path / "dex-cache"), 1 << 20))
    yield blob_cache
    blob_cache.close()


def new_session() -> str:
    return f"session-{uuid.uuid4().hex[:10]}"


@dataclass
class Run:
    """One session on the SDK's dispatcher."""

    flow: AgentSessionFlow
    worker: SdkWorker
    driver: Driver
    model: ScriptedModel

    @property
    def session_id(self) -> str:
        return self.driver.flow_id

    def events(self, kind: SessionEventType | None = None) -> list[SessionEvent]:
        found = self.driver.stream(SessionEvent)
        return [e for e in found if kind is None or e.type is kind]

    def say(self, text: str = "", *, close: bool = False) -> None:
        self.driver.publish(USER_MESSAGES.name, UserMessage(uuid.uuid4().hex, text, close))

    def output(self) -> SessionResult:
        assert self.driver.output is not None, f"still waiting: {self.driver.waiting()}"
        return self.worker.decode(self.driver.output, SessionResult)


def start(
    flow: AgentSessionFlow, cache: BlobCache, model: ScriptedModel, text: str = "Please help"
) -> Run:
    worker = SdkWorker(flow, cache)
    driver = Driver(worker, new_session(), attempts={"RunModel": 3})
    driver.on_failure["RunModel"] = "FailTurn"
    driver.start("StartAgentSession", SessionStart(text, requested_by="carol"))
    return Run(flow, worker, driver, model)


def agent_session(
    harness: Harness,
    kind: Kind,
    script: list[AIMessage] | str,
    *,
    effects: Effects | None = None,
    specs: tuple[ToolSpec, ...] | None = None,
) -> tuple[AgentSessionFlow, ScriptedModel]:
    model = ScriptedModel(script=SCRIPTS[script] if isinstance(script, str) else script)
    tools = build_tools(effects or Effects(harness.db))
    signoff = harness.signoff(specs)
    graph = build_agent(kind, model, tools, signoff, harness.saver)
    flow = AgentSessionFlow(AgentSession(graph, harness.saver, signoff), recheck_every=RECHECK)
    return flow, model


async def pending_approvals(store: ApprovalStore, session_id: str) -> dict[str, str]:
    found = await store.find(run_id=session_id, status=ApprovalStatus.PENDING)
    return {a.call_id: a.approval_id for a in found}


# -- the Flow in a real Registry ---------------------------------------------------------------


def test_the_session_flow_validates_in_a_real_registry() -> None:
    flow = AgentSessionFlow()  # a Client-only Flow
    registry = Registry([flow], allow_async_handlers=True)
    steps = {s.get_step_type() for s in flow.steps}
    assert registry.flows == (flow,)
    assert steps == {
        "RunModel",
        "ResumeTurn",
        "FailTurn",
        "AwaitUserMessage",
        "AwaitToolApproval",
        "CallTool",
        "SettleToolCall",
    }
    codecs = registry.codec_registry
    for value in (
        SessionStart("hi", "carol"),
        UserMessage("m1", "more", False),
        SessionResult(2, "failed", "boom"),
        SessionEvent(SessionEventType.TEXT_DELTA, 1, "RunModel-1", 2, {"text": "hé"}),
        ToolCallRequest("c1", "refund", {}, "1", "carol", checkpoint_id="1f0-abc"),
    ):
        codec = codecs.resolve(type(value))
        assert codec.decode(codec.encode(value)) == value
    with pytest.raises(ValueError, match="whole seconds"):
        AgentSessionFlow(recheck_every=timedelta(milliseconds=1500))


async def test_a_graph_the_session_cannot_run_is_refused_when_built(harness: Harness) -> None:
    model = ScriptedModel(script=[])
    tools = build_tools(Effects(harness.db))
    signoff = harness.signoff()
    graph = build_agent(Kind.GRAPH, model, tools, signoff, harness.saver)
    with pytest.raises(SessionGraphRefused, match="no node 'act'"):
        AgentSession(graph, harness.saver, signoff, tool_nodes=("act",))
    paused = create_agent(model, tools=tools, interrupt_before=["tools"])
    with pytest.raises(SessionGraphRefused, match="interrupt_before"):
        AgentSession(paused, harness.saver, signoff)


# -- a whole session through the SDK's dispatcher ----------------------------------------------


@pytest.mark.parametrize("kind", [Kind.BATCHED, Kind.AGENT, Kind.GRAPH])
async def test_a_session_runs_parallel_calls_with_approvals_from_the_store(
    harness: Harness, cache: BlobCache, kind: Kind
) -> None:
    flow, model = agent_session(harness, kind, "parallel")
    run = start(flow, cache, model, "Refund A7 and B2")
    session_id = run.session_id
    await run.driver.run()
    # One model call; the read ran in its own Step (its wake-up finds the turn unfinished:
    # ResumeTurn waits again); both refunds wait for their approvals.
    assert run.driver.executed == ["StartAgentSession", "RunModel", "CallTool", "ResumeTurn"]
    assert sorted(run.driver.waiting()) == ["AwaitToolApproval", "AwaitToolApproval", "ResumeTurn"]
    assert len(model.seen) == 1
    waiting = await pending_approvals(harness.store, session_id)
    assert set(waiting) == {"par-2", "par-3"}
    raised = run.events(SessionEventType.INTERRUPT_RAISED)
    assert {(e.payload["call_id"], e.payload["approval_id"]) for e in raised} == set(
        waiting.items()
    )
    assert all(set(e.payload) == {"approval_id", "call_id", "tool", "status"} for e in raised)
    # Dex holds no run state: the Steps' inputs name the checkpoint, never the arguments.
    for pending in run.driver.pending:
        assert b"A7" not in pending.input.SerializeToString()

    # par-2: decided through the decide RPC, which wakes its Step.
    approval = await harness.store.get(waiting["par-2"])
    _, published = await run.worker.decide(
        session_id, DecideRequest.of(approval, Decision.approve(), "alice")
    )
    run.driver.publish(run.worker.channel("par-2"), published[0])
    # par-3: rejected in the store only (the CLI, the HTTP service): no wake-up.
    await harness.store.decide(waiting["par-3"], Decision.reject("too much"), "alice")
    await run.driver.run()
    assert sorted(run.driver.waiting()) == ["AwaitToolApproval", "ResumeTurn"]
    assert len(model.seen) == 1, "the model waits for every call"
    await run.driver.run(fire_timers=True)  # the re-check sees the rejection
    assert run.driver.waiting() == ["AwaitUserMessage"]

    assert len(model.seen) == 2
    results = [m for m in model.seen[-1] if isinstance(m, ToolMessage)]
    assert [(m.tool_call_id, m.status) for m in results] == [
        ("par-1", "success"),
        ("par-2", "success"),
        ("par-3", "error"),
    ]
    assert "rejected" in str(results[2].content)
    ledger = await calls_of(harness.db, session_id)
    assert {c: e["status"] for c, e in ledger.items()} == {
        "par-1": "succeeded",
        "par-2": "succeeded",
        "par-3": "denied",
    }
    assert ledger["par-2"]["idempotency_key"] == f"{session_id}/1/par-2"
    refunds = await effects_of(harness.db, session_id, "refund")
    assert [(r["args"], r["idempotency_key"]) for r in refunds] == [
        ({"order_id": "A7", "amount": 120}, f"{session_id}/1/par-2")
    ]
    assert len(await effects_of(harness.db, session_id, "lookup_order")) == 1

    text = "".join(e.payload["text"] for e in run.events(SessionEventType.TEXT_DELTA))
    assert text == "Both refunds are done."
    [done] = run.events(SessionEventType.TURN_COMPLETED)
    assert (done.turn, done.payload) == (1, {"status": "completed", "error": None})

    # The snapshot: read from the encrypted checkpoint, not from Dex.
    unreachable = ClientOptions(server_address="127.0.0.1:1")
    async with AsyncClient(run.worker.registry, cache, unreachable) as client:
        sessions = SessionClient(client, flow, harness.store, harness.saver)
        snapshot = await sessions.snapshot(session_id)
    assert [(m.role, m.tool_call_id, m.error) for m in snapshot.messages] == [
        ("user", None, False),
        ("assistant", None, False),
        ("tool", "par-1", False),
        ("tool", "par-2", False),
        ("tool", "par-3", True),
        ("assistant", None, False),
    ]
    assert snapshot.messages[0].text == "Refund A7 and B2"
    assert snapshot.messages[-1].text == "Both refunds are done."
    assert snapshot.pending_approvals == []

    run.say(close=True)
    await run.driver.run()
    assert run.output() == SessionResult(1, "completed", None)


async def test_a_second_turn_and_a_rerun_model_step_add_nothing_twice(
    harness: Harness, cache: BlobCache, database_url: str
) -> None:
    flow, model = agent_session(harness, Kind.BATCHED, "two-turns")
    run = start(flow, cache, model)
    await run.driver.run()
    [approval_id] = (await pending_approvals(harness.store, run.session_id)).values()
    decided = await run_cli(  # another process decides, with the signoff CLI
        "approvals", "decide", approval_id, "--approve", "--by", "bob",
        database_url=database_url, env=kek_env(),
    )  # fmt: skip
    assert decided.code == 0, decided.stderr
    await run.driver.run(fire_timers=True)  # no wake-up: the re-check sees it
    assert run.driver.waiting() == ["AwaitUserMessage"]
    assert len(model.seen) == 3  # lookup, then refund, then the answer

    # Dex runs the last RunModel again (its result was lost): no model call, nothing added.
    again, _ = await run.worker.execute("RunModel", run.session_id, TurnStep(1, "carol"))
    assert [m.step_type for m in again.step_decision.next_steps] == ["AwaitUserMessage"]
    assert len(model.seen) == 3

    run.say("Thanks, and order B2?")
    await run.driver.run()
    user = [m for m in model.seen[-1] if isinstance(m, HumanMessage)]
    assert [m.content for m in user] == ["Please help", "Thanks, and order B2?"]
    assert run.driver.waiting() == ["AwaitUserMessage"]
    assert len(await effects_of(harness.db, run.session_id, "refund")) == 1


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
    note = [m for m in model.seen[-1] if isinstance(m, HumanMessage)][1]
    assert "do not make them again" in str(note.content)
    assert "refund (call refund-1): succeeded: refunded 120 EUR on A7" in str(note.content)
    assert len(await effects_of(harness.db, run.session_id, "refund")) == 1


# -- least privilege ---------------------------------------------------------------------------


async def test_the_session_steps_run_on_a_worker_only_login(
    server_url: str, cache: BlobCache
) -> None:
    kek = LocalKek(TEST_KEK)
    async with scratch_database(server_url, prefix="signoff_dex_session") as owner:
        async with await Database.connect(owner) as db:
            await KeyRing.open(db, kek)
            await create_effects_table(db)
            async with db.connection() as conn:
                await conn.execute("GRANT SELECT, INSERT ON agent_effects TO signoff_app")
        async with (
            temporary_login(owner, "signoff_app") as worker_url,
            temporary_login(owner, "signoff_reviewer") as reviewer_url,
            open_harness(worker_url, kek, lease_seconds=1.0) as worker,
            await Database.connect(reviewer_url) as reviewer_db,
        ):
            reviewer = ApprovalStore(reviewer_db, await KeyRing.open(reviewer_db, kek))
            flow, model = agent_session(worker, Kind.GRAPH, "refund")
            run = start(flow, cache, model)
            await run.driver.run()
            [approval_id] = (await pending_approvals(worker.store, run.session_id)).values()
            with pytest.raises(EventNotPermitted):  # a worker cannot decide
                await worker.store.decide(approval_id, Decision.approve(), "mallory")
            await reviewer.decide(approval_id, Decision.approve(), "alice")
            await run.driver.run(fire_timers=True)
            assert run.driver.waiting() == ["AwaitUserMessage"]
            statuses = {
                c: e["status"] for c, e in (await calls_of(worker.db, run.session_id)).items()
            }
            assert statuses == {"refund-1": "succeeded"}
            await reviewer.close()


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
    return start_program("tests.dex_session_workers", *args, env=kek_env())


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

    await killed_after(await program("run-model", database_url, session_id, "1", "yes"), b"model")
    successor = await finish(await program("run-model", database_url, session_id, "1", "no"))
    assert json.loads(successor.splitlines()[-1]) == ["AwaitUserMessage"]

    turns = [turn for turn, _ in await model_calls(harness.db, session_id)]
    assert turns == [0, 1, 1], "the first model call ran once, the killed one once more"
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


# -- a live Dex server -------------------------------------------------------------------------


@pytest.mark.skipif(
    not DEX_SERVER_ADDRESS,
    reason="needs a live Dex server: set DEX_SERVER_ADDRESS=host:port (none can be installed "
    "on these machines, so this test has not run here)",
)
async def test_a_session_end_to_end_on_a_live_dex_server(
    harness: Harness, cache: BlobCache
) -> None:
    model = ScriptedModel(script=SCRIPTS["parallel"])
    signoff = harness.signoff()
    graph = build_agent(
        Kind.BATCHED, model, build_tools(Effects(harness.db)), signoff, harness.saver
    )
    flow = AgentSessionFlow(
        AgentSession(graph, harness.saver, signoff),
        flow_type=f"SignoffAgentSessionTest{uuid.uuid4().hex[:6]}",
        recheck_every=timedelta(seconds=5),
    )
    registry = Registry([flow], allow_async_handlers=True)
    worker = AsyncWorker(
        registry, cache, WorkerOptions(server_address=DEX_SERVER_ADDRESS, pull=PullWorkerOptions())
    )
    client = AsyncClient(
        registry,
        cache,
        ClientOptions(server_address=DEX_SERVER_ADDRESS, worker_target=worker.worker_target),
    )
    serving = asyncio.create_task(worker.start())
    try:
        await worker.wait_pull_registered(timeout=30)
        sessions = SessionClient(client, flow, harness.store, harness.saver)
        session_id = new_session()
        await sessions.start_session(session_id, "Refund A7 and B2", requested_by="carol")
        token, text, raised = "", "", set()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                message = await sessions.read_event(session_id, token, timedelta(seconds=5))
            except LongPollTimeoutError:
                continue
            token, event = message.resume_token, message.value
            if event.type is SessionEventType.TEXT_DELTA:
                text += event.payload["text"]
            elif event.type is SessionEventType.INTERRUPT_RAISED:
                approval_id = event.payload["approval_id"]
                if approval_id not in raised:
                    raised.add(approval_id)
                    decision = (
                        Decision.approve()
                        if event.payload["call_id"] == "par-2"
                        else Decision.reject("no")
                    )
                    await sessions.resolve_interrupt(approval_id, decision, "alice")
            elif event.type is SessionEventType.TURN_COMPLETED:
                break
        assert text == "Both refunds are done." and len(raised) == 2
        await sessions.close_session(session_id)
        result = (await client.wait_for_flow(session_id, timedelta(seconds=60))).single_output(
            SessionResult
        )
        assert result == SessionResult(1, "completed", None)
        snapshot = await sessions.snapshot(session_id)
        assert snapshot.messages[-1].text == "Both refunds are done."
        assert len(await effects_of(harness.db, session_id, "refund")) == 1
    finally:
        await worker.stop()
        await serving
        await client.close()


async def test_an_interrupt_resolved_while_dex_is_down_is_seen_at_the_recheck(
    harness: Harness, cache: BlobCache
) -> None:
    flow, model = agent_session(harness, Kind.GRAPH, "refund")
    run = start(flow, cache, model)
    await run.driver.run()
    [raised] = run.events(SessionEventType.INTERRUPT_RAISED)
    unreachable = ClientOptions(server_address="127.0.0.1:1")
    async with AsyncClient(run.worker.registry, cache, unreachable) as client:
        sessions = SessionClient(client, flow, harness.store, harness.saver)
        with pytest.raises(DexServiceError):
            await sessions.resolve_interrupt(
                raised.payload["approval_id"], Decision.approve(), "alice", attempts=1
            )
        assert (await sessions.snapshot(run.session_id)).pending_approvals == []
    await run.driver.run(fire_timers=True)
    assert run.driver.waiting() == ["AwaitUserMessage"]
    assert len(await effects_of(harness.db, run.session_id, "refund")) == 1


async def test_a_once_per_run_tool_called_twice_runs_once_and_the_turn_goes_on(
    harness: Harness, cache: BlobCache
) -> None:
    script = [
        calls(("o-1", "refund", {"order_id": "A7", "amount": 1})),
        calls(("o-2", "refund", {"order_id": "A7", "amount": 2})),
        AIMessage(content="Refunded once."),
    ]
    specs = (ToolSpec("refund", Effect.SINGLE_ATTEMPT, once_per_run=True),)
    flow, model = agent_session(harness, Kind.BATCHED, script, specs=specs)
    run = start(flow, cache, model)
    await run.driver.run()
    assert run.driver.waiting() == ["AwaitUserMessage"]
    refunds = await effects_of(harness.db, run.session_id, "refund")
    assert [r["args"]["amount"] for r in refunds] == [1]
    results = [m.content for m in model.seen[-1] if isinstance(m, ToolMessage)]
    assert results == ["refunded 1 EUR on A7"] * 2, "the second call replays the first"


async def test_reasoning_and_text_stream_as_events(harness: Harness, cache: BlobCache) -> None:
    answer = AIMessage(
        content=[
            {"type": "reasoning", "reasoning": "The order was delivered."},
            {"type": "text", "text": "Order A7 "},
            {"type": "text", "text": "arrived."},
        ]
    )
    flow, model = agent_session(harness, Kind.BATCHED, [answer])
    run = start(flow, cache, model)
    await run.driver.run()
    events = [(e.type, e.payload.get("text"), e.turn) for e in run.events()]
    assert events == [
        (SessionEventType.REASONING_DELTA, "The order was delivered.", 1),
        (SessionEventType.TEXT_DELTA, "Order A7 ", 1),
        (SessionEventType.TEXT_DELTA, "arrived.", 1),
        (SessionEventType.TURN_COMPLETED, None, 1),
    ]
    [done] = run.events(SessionEventType.TURN_COMPLETED)
    assert done.step_execution_id == "RunModel-1" and done.attempt == 1


async def test_a_user_message_delivered_again_while_it_waits_is_queued_once(
    harness: Harness, cache: BlobCache
) -> None:
    flow, _ = agent_session(harness, Kind.GRAPH, "read")
    worker = SdkWorker(flow, cache)
    session_id, message = new_session(), UserMessage("m-1", "and B2?")
    fresh = await worker.rpc(session_id, SEND_MESSAGE_RPC, message, {USER_MESSAGES.name: []})
    assert worker.decode(fresh.output, bool) is True
    assert [worker.decode(m.value, UserMessage) for m in fresh.publish_to_channel] == [message]
    again = await worker.rpc(session_id, SEND_MESSAGE_RPC, message, {USER_MESSAGES.name: [message]})
    assert (worker.decode(again.output, bool), list(again.publish_to_channel)) == (False, [])


async def test_the_run_state_is_stored_encrypted(harness: Harness, cache: BlobCache) -> None:
    flow, model = agent_session(harness, Kind.BATCHED, "read")
    run = start(flow, cache, model, "Where is my order?")
    await run.driver.run()
    assert run.driver.waiting() == ["AwaitUserMessage"]
    async with harness.db.connection() as conn:
        rows = await conn.fetch(
            "SELECT checkpoint::text || metadata::text AS data FROM checkpoints"
            " WHERE thread_id = $1",
            run.session_id,
        )
        blobs = await conn.fetch(
            "SELECT blob FROM checkpoint_blobs WHERE thread_id = $1 AND blob IS NOT NULL"
            " UNION ALL SELECT blob FROM checkpoint_writes WHERE thread_id = $1",
            run.session_id,
        )
    assert rows and blobs
    for secret in ("Where is my order", "120 EUR, delivered", "Order A7 was delivered"):
        assert [r["data"] for r in rows if secret in r["data"]] == [], secret
        assert not any(secret.encode() in bytes(b["blob"]) for b in blobs), secret
    snapshot = await SessionClient(
        cast(AsyncClient, None), flow, harness.store, harness.saver
    ).snapshot(run.session_id)
    assert snapshot.messages[0].text == "Where is my order?"


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
