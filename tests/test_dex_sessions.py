"""Dex agent sessions: a create_agent agent (with `SignoffMiddleware`) and a custom StateGraph
(with `signoff_tool_node`) run as `AgentSessionFlow`s, validated in a real `dex.Registry`, every
Step through the SDK's own dispatcher and codecs (`tests/support/dex_dispatch.py`: the server is
played by `Driver`, which runs each movement the Steps return), on the real database with the
encrypted checkpointer; end to end on a live Dex server when `DEX_SERVER_ADDRESS` is set. The
failure cases (and SIGKILL) are in test_dex_session_failures.py.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import cast

import pytest
from dex import (
    AsyncClient,
    AsyncWorker,
    BlobCache,
    ClientOptions,
    DexServiceError,
    LongPollTimeoutError,
    PullWorkerOptions,
    Registry,
    WorkerOptions,
)
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.graph import START, StateGraph

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
    UserMessage,
)
from adapters.langgraph import SignoffMiddleware, ToolSpec, signoff_tool_node
from adapters.langgraph.middleware import EDIT_NOTICE
from approvals import ApprovalPolicy, ApprovalStatus, ApprovalStore, Decision
from ledger.calls.model import Effect
from ledger.errors import EventNotPermitted
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.logins import temporary_login

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
    create_effects_table,
    effects_of,
    open_harness,
)
from .support.dex_dispatch import SdkWorker
from .support.directory import list_reviewers
from .support.processes import TEST_KEK, kek_env, run_cli
from .support.scratch import scratch_database
from .support.session_runs import (
    agent_session,
    blob_cache,
    new_session,
    pending_approvals,
    session_harness,
    start,
)

DEX_SERVER_ADDRESS = os.environ.get("DEX_SERVER_ADDRESS", "")


@pytest.fixture(scope="module")
async def harness(database_url: str) -> AsyncIterator[Harness]:
    async with session_harness(database_url) as opened:
        yield opened


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[BlobCache]:
    with blob_cache(tmp_path) as opened:
        yield opened


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
    # interrupt_on gives lookup_order an approval only the middleware's SignoffTools hold.
    gated = SignoffMiddleware(signoff, interrupt_on={"lookup_order": True})
    agent = create_agent(model, tools=tools, middleware=[gated])
    with pytest.raises(SessionGraphRefused, match=r"\['lookup_order'\].*middleware.signoff"):
        AgentSession(agent, harness.saver, signoff)
    session = AgentSession(agent, harness.saver, gated.signoff)
    assert session.runtime().tool("lookup_order").spec.approval is not None


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

    # par-2: decided in the store (as resolve_interrupt does), then the decide RPC wakes its
    # Step; the RPC itself records nothing.
    approval = await harness.store.get(waiting["par-2"])
    assert (approval.run_id, approval.requested_by) == (session_id, "carol")
    request = DecideRequest.of(approval, Decision.approve(), "alice")
    early, published = await run.worker.decide(session_id, request)
    assert (early.status, early.signalled, published) == (ApprovalStatus.PENDING, False, [])
    await harness.store.decide(waiting["par-2"], Decision.approve(), "alice")
    _, published = await run.worker.decide(session_id, request)
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
    at = done.payload["checkpoint_id"]
    assert (done.turn, done.payload) == (
        1,
        {"status": "completed", "error": None, "checkpoint_id": at},
    )

    # The snapshot: read from the encrypted checkpoint the event names, not from Dex.
    unreachable = ClientOptions(server_address="127.0.0.1:1")
    async with AsyncClient(run.worker.registry, cache, unreachable) as client:
        sessions = SessionClient(client, flow, harness.store, harness.saver)
        snapshot = await sessions.snapshot(session_id, at)
        assert snapshot == await sessions.snapshot(session_id)  # the latest, here
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
    assert run.output() == SessionResult(1, "completed", None, at)


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

    # Dex runs the last RunModel again (its result was lost): from the checkpoint its input
    # names, so the model call is made again and nothing is added twice.
    last = next(p for p in reversed(run.driver.history) if p.step == "RunModel")
    again, _ = await run.worker.execute("RunModel", run.session_id, last.input)
    assert [m.step_type for m in again.step_decision.next_steps] == ["AwaitUserMessage"]
    assert len(model.seen) == 4
    assert len(await effects_of(harness.db, run.session_id, "refund")) == 1

    run.say("Thanks, and order B2?")
    await run.driver.run()
    user = [m for m in model.seen[-1] if isinstance(m, HumanMessage)]
    assert [m.content for m in user] == ["Please help", "Thanks, and order B2?"]
    assert run.driver.waiting() == ["AwaitUserMessage"]
    assert len(await effects_of(harness.db, run.session_id, "refund")) == 1


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


@pytest.mark.parametrize("parallel", [False, True])
async def test_a_once_per_run_call_answered_by_an_earlier_one_asks_nobody(
    harness: Harness, cache: BlobCache, parallel: bool
) -> None:
    """The second call of a once-per-run tool replays the first: no reviewer is asked to
    approve it once the first has finished, and its Step does not wait for an approval that
    cannot change anything (asked already when both calls came in one message)."""
    first = ("o-1", "refund", {"order_id": "A7", "amount": 1})
    second = ("o-2", "refund", {"order_id": "A7", "amount": 2})
    answer = AIMessage(content="Refunded once.")
    script = [calls(first, second), answer] if parallel else [calls(first), calls(second), answer]
    specs = (
        ToolSpec("refund", Effect.SINGLE_ATTEMPT, approval=ApprovalPolicy(), once_per_run=True),
    )
    flow, model = agent_session(harness, Kind.BATCHED, script, specs=specs)
    run = start(flow, cache, model)
    await run.driver.run()
    waiting = await pending_approvals(harness.store, run.session_id)
    assert list(waiting) == (["o-1", "o-2"] if parallel else ["o-1"])
    await harness.store.decide(waiting["o-1"], Decision.approve(), "alice")
    await run.driver.run(fire_timers=True)
    assert run.driver.waiting() == ["AwaitUserMessage"]
    left = await pending_approvals(harness.store, run.session_id)
    assert list(left) == (["o-2"] if parallel else [])
    refunds = await effects_of(harness.db, run.session_id, "refund")
    assert [r["args"]["amount"] for r in refunds] == [1]
    results = [m.content for m in model.seen[-1] if isinstance(m, ToolMessage)]
    assert results == ["refunded 1 EUR on A7"] * 2


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


# -- least privilege ---------------------------------------------------------------------------


async def test_the_session_steps_run_on_a_worker_only_login(
    server_url: str, cache: BlobCache
) -> None:
    kek = LocalKek(TEST_KEK)
    async with scratch_database(server_url, prefix="signoff_dex_session") as owner:
        await list_reviewers(owner, "alice", "mallory")  # the logins refuse mallory, not the policy
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
            approval = await worker.store.get(approval_id)
            # The decide RPC, served by these Workers, decides nothing either: whoever reaches
            # it names a reviewer of their choosing, and nothing is recorded or woken.
            forged = DecideRequest.of(approval, Decision.approve(), "mallory")
            undecided, woken = await run.worker.decide(run.session_id, forged)
            assert (undecided.status, woken) == (ApprovalStatus.PENDING, [])
            assert (await worker.store.get(approval_id)).status is ApprovalStatus.PENDING
            # The reviewer side records the decision; the RPC then only wakes the session.
            await reviewer.decide(approval_id, Decision.approve(), "alice")
            told = DecideRequest.of(approval, Decision.approve(), "alice")
            result, woken = await run.worker.decide(run.session_id, told)
            assert (result.status, result.signalled) == (ApprovalStatus.APPROVED, True)
            run.driver.publish(run.worker.channel(approval.call_id), woken[0])
            await run.driver.run()
            assert run.driver.waiting() == ["AwaitUserMessage"]
            statuses = {
                c: e["status"] for c, e in (await calls_of(worker.db, run.session_id)).items()
            }
            assert statuses == {"refund-1": "succeeded"}
            await reviewer.close()
            await flow.session().close()  # its policy point listens on this scratch database


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
        assert (result.turn, result.status, result.error) == (1, "completed", None)
        snapshot = await sessions.snapshot(session_id)
        assert snapshot.messages[-1].text == "Both refunds are done."
        assert len(await effects_of(harness.db, session_id, "refund")) == 1
    finally:
        await worker.stop()
        await serving
        await client.close()


async def test_an_edited_call_runs_the_edited_arguments_and_the_model_is_told(
    harness: Harness, cache: BlobCache
) -> None:
    flow, model = agent_session(harness, Kind.BATCHED, "refund")
    run = start(flow, cache, model)
    await run.driver.run()
    [approval_id] = (await pending_approvals(harness.store, run.session_id)).values()
    edited = {"order_id": "A7", "amount": 60}
    await harness.store.decide(approval_id, Decision.edit(edited), "alice")
    await run.driver.run(fire_timers=True)
    assert run.driver.waiting() == ["AwaitUserMessage"]
    [refund] = await effects_of(harness.db, run.session_id, "refund")
    assert refund["args"] == edited
    [result] = [m for m in model.seen[-1] if isinstance(m, ToolMessage)]
    assert str(result.content).startswith(EDIT_NOTICE)
    assert "refunded 60 EUR on A7" in str(result.content)


async def test_two_tool_nodes_with_different_tools_of_one_name_need_tools_to_say_which(
    harness: Harness,
) -> None:
    signoff = harness.signoff()
    first, second = build_tools(Effects(harness.db)), build_tools(Effects(harness.db))
    graph = StateGraph(AgentState)
    graph.add_node("tools", signoff_tool_node(first, signoff))
    graph.add_node("more_tools", signoff_tool_node(second, signoff))
    graph.add_edge(START, "tools")
    graph.add_edge("tools", "more_tools")
    compiled = graph.compile()
    nodes = ("tools", "more_tools")
    with pytest.raises(SessionGraphRefused, match="different tools named 'lookup_order'"):
        AgentSession(compiled, harness.saver, signoff, tool_nodes=nodes)
    chosen = AgentSession(compiled, harness.saver, signoff, tools=second, tool_nodes=nodes)
    assert chosen.by_name == {t.name: t for t in second}
