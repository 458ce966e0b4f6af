"""Traces and metrics, as an operator's OpenTelemetry SDK receives them (its in-memory exporter
and reader): a call through the ledger is the GenAI `execute_tool` span, pointing at the journal
event that recorded its outcome; approvals, checkpoints and the HTTP service have spans of their
own; nothing sealed ever appears. The agent side runs on a login with only `signoff_app`."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from adapters.langgraph import encrypted_checkpointer
from adapters.runtime import ToolSpec
from adapters.runtime import flow as runtime
from approvals import ApprovalPolicy, ApprovalStore, Decision
from ledger.calls.model import CallContext, Effect, ToolCall, ToolPolicy
from ledger.calls.service import ToolLedger
from ledger.journal.reader import read_stream
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.settings import Settings
from ledger.telemetry import Attr, Metric

from .support.http import reviewer_service
from .support.processes import TEST_KEK, TEST_REVIEWER_KEK
from .support.telemetry import Captured, captured
from .support.worker_login import worker_login

SECRET = "4111-1111-1111-1111"  # an argument and a result that must never reach a span


@dataclass
class Site:
    ledger: ToolLedger  # on the worker login
    worker: ApprovalStore  # the agent's store, on the worker login
    reviewer: ApprovalStore  # the owner's, with the reviewer KEK
    db: Database  # the worker's


@pytest.fixture(scope="module")
async def site(server_url: str) -> AsyncIterator[Site]:
    kek = LocalKek(TEST_KEK)
    async with worker_login(server_url, kek, prefix="signoff_traces") as login:
        owner_settings = Settings(
            database_url=login.owner_url, kek=kek, reviewer_kek=LocalKek(TEST_REVIEWER_KEK)
        )
        async with (
            await Database.connect(login.url, settings=login.settings) as db,
            await Database.connect(login.owner_url, settings=owner_settings) as owner,
        ):
            ring = await KeyRing.open(db)
            ledger = ToolLedger(db, ring, poll_interval=0.05)
            worker = ApprovalStore(db, ring, poll_interval=0.05)
            reviewer = ApprovalStore(owner, await KeyRing.open(owner), poll_interval=0.05)
            try:
                yield Site(ledger, worker, reviewer, db)
            finally:
                await ledger.close()
                await worker.close()
                await reviewer.close()


def run_id() -> str:
    return f"run-{uuid.uuid4().hex[:10]}"


async def card(args: dict[str, Any], context: CallContext) -> dict[str, str]:
    return {"charged": SECRET}


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def nothing_sealed(spans: list[ReadableSpan]) -> None:
    for span in spans:
        text = json.dumps(attributes(span), default=str) + span.name
        assert SECRET not in text, f"{span.name} carries a sealed value"
        assert "gen_ai.tool.call.arguments" not in text and "gen_ai.tool.call.result" not in text


async def last_event(db: Database, run: str, call_id: str) -> tuple[int, str]:
    async with db.connection() as conn:
        events = await read_stream(conn, f"call:{run}/{call_id}")
    return events[-1].position, events[-1].hash.hex()


def calls_counted(capture: Captured, tool: str, status: str, replayed: bool) -> int:
    return sum(
        point.value
        for attrs, point in capture.points(Metric.TOOL_CALLS)
        if attrs == {Attr.TOOL_NAME: tool, Attr.CALL_STATUS: status, Attr.CALL_REPLAYED: replayed}
    )


async def test_a_call_and_its_replay_point_at_the_event_that_recorded_it(site: Site) -> None:
    run, tool = run_id(), f"charge_{uuid.uuid4().hex[:6]}"
    call = ToolCall(run, "c1", tool, {"card": SECRET})
    with captured() as capture:
        ran = await site.ledger.execute(call, card, ToolPolicy(Effect.SINGLE_ATTEMPT))
        again = await site.ledger.execute(call, card, ToolPolicy(Effect.SINGLE_ATTEMPT))
    assert (ran.replayed, again.replayed) == (False, True)
    first, second = capture.named(f"execute_tool {tool}")
    position, digest = await last_event(site.db, run, "c1")
    for span, replayed in ((first, False), (second, True)):
        assert span.kind is SpanKind.INTERNAL
        assert attributes(span) == {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.call.id": "c1",
            "gen_ai.tool.type": "function",
            "signoff.run.id": run,
            "signoff.call.effect": "single_attempt",
            "signoff.call.status": "succeeded",
            "signoff.call.attempt": 1,
            "signoff.call.replayed": replayed,
            "signoff.journal.position": position,
            "signoff.event.hash": digest,
        }
        assert span.status.status_code is StatusCode.UNSET
    assert calls_counted(capture, tool, "succeeded", False) == 1
    assert calls_counted(capture, tool, "succeeded", True) == 1
    nothing_sealed(capture.spans)


async def test_a_tool_that_may_have_acted_ends_as_outcome_unknown(site: Site) -> None:
    run, tool = run_id(), f"wire_{uuid.uuid4().hex[:6]}"

    async def breaks(args: dict[str, Any], context: CallContext) -> None:
        raise ConnectionResetError(SECRET)

    with captured() as capture:
        outcome = await site.ledger.execute(
            ToolCall(run, "c1", tool, {"to": SECRET}), breaks, ToolPolicy(Effect.SINGLE_ATTEMPT)
        )
    assert outcome.status == "outcome_unknown"
    span = capture.one(f"execute_tool {tool}")
    assert attributes(span)["signoff.call.status"] == "outcome_unknown"
    assert attributes(span)["error.type"] == "outcome_unknown"
    assert span.status.status_code is StatusCode.ERROR
    position, digest = await last_event(site.db, run, "c1")
    assert attributes(span)["signoff.journal.position"] == position
    assert attributes(span)["signoff.event.hash"] == digest
    assert calls_counted(capture, tool, "outcome_unknown", False) == 1
    nothing_sealed(capture.spans)


async def decided_call(site: Site, decision: Decision) -> tuple[str, str]:
    """A call asked for a four-eyes approval, waited for, decided and run; (run, tool)."""
    run, tool = run_id(), f"refund_{uuid.uuid4().hex[:6]}"
    spec = ToolSpec(tool, Effect.SINGLE_ATTEMPT, ApprovalPolicy(approvers=frozenset({"cfo"})))
    call = ToolCall(run, "c1", tool, {"card": SECRET})
    asked = await runtime.ask(site.worker, spec, call, requested_by="agent")
    pending = await runtime.await_final(site.worker, asked.approval_id, 0.01)
    assert pending.status == "pending"
    await site.reviewer.decide(asked.approval_id, decision, "cfo")
    final = await runtime.await_final(site.worker, asked.approval_id, 30)
    assert final.status.final
    await runtime.run(site.ledger, site.worker, spec, call, card, asked.approval_id)
    return run, tool


def waits_observed(capture: Captured, tool: str) -> int:
    return sum(
        point.count
        for attrs, point in capture.points(Metric.APPROVAL_WAIT)
        if attrs == {Attr.APPROVAL_TIER: "four_eyes", Attr.TOOL_NAME: tool}
    )


async def test_an_approved_call_shows_its_wait_and_its_consumption(site: Site) -> None:
    with captured() as capture:
        _, tool = await decided_call(site, Decision.approve())
    waits = capture.named("signoff.approval.wait")
    assert [attributes(w)["signoff.approval.status"] for w in waits] == ["pending", "approved"]
    call = capture.one(f"execute_tool {tool}")
    consume = capture.one("signoff.approval.consume")
    approval_id = attributes(consume)["signoff.approval.id"]
    assert consume.parent is not None and consume.parent.span_id == call.context.span_id
    assert attributes(consume)["signoff.approval.status"] == "approved"
    assert attributes(call)["signoff.approval.id"] == approval_id
    assert attributes(call)["signoff.call.status"] == "succeeded"
    assert waits_observed(capture, tool) == 1
    nothing_sealed(capture.spans)


async def test_a_rejected_call_is_denied_in_its_span(site: Site) -> None:
    with captured() as capture:
        run, tool = await decided_call(site, Decision.reject(f"no: {SECRET}"))
    call = capture.one(f"execute_tool {tool}")
    assert attributes(call)["signoff.call.status"] == "denied"
    assert call.status.status_code is StatusCode.UNSET  # the gate did its job; nothing failed
    assert attributes(capture.one("signoff.approval.consume"))["signoff.approval.status"] == (
        "rejected"
    )
    position, digest = await last_event(site.db, run, "c1")
    assert (
        attributes(call)["signoff.journal.position"],
        attributes(call)["signoff.event.hash"],
    ) == (
        position,
        digest,
    )
    assert calls_counted(capture, tool, "denied", False) == 1
    nothing_sealed(capture.spans)


async def test_without_capture_nothing_records(site: Site) -> None:
    """Outside `captured()` the sampler drops every span: the library's path when no span
    records (no event lookup, no attributes) is the one the rest of the suite runs."""
    seen: list[bool] = []

    async def looks(args: dict[str, Any], context: CallContext) -> None:
        from opentelemetry import trace

        seen.append(trace.get_current_span().is_recording())

    with captured() as capture:
        pass
    await site.ledger.execute(ToolCall(run_id(), "c1", "look", {}), looks, ToolPolicy(Effect.READ))
    assert seen == [False]
    assert capture.spans == []


class Counted(TypedDict):
    card: str
    steps: int


async def test_checkpoint_reads_and_writes_are_spans_of_their_thread(site: Site) -> None:
    def step(state: Counted) -> dict[str, int]:
        return {"steps": state["steps"] + 1}

    builder = StateGraph(Counted)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    thread = f"thread-{uuid.uuid4().hex[:8]}"
    async with encrypted_checkpointer(site.db, site.ledger.ring) as saver:
        graph = builder.compile(checkpointer=saver)
        config: RunnableConfig = {"configurable": {"thread_id": thread}}
        with captured() as capture:
            await graph.ainvoke({"card": SECRET, "steps": 0}, config)
            state = await graph.aget_state(config)
    assert state.values["steps"] == 1
    writes = capture.named("signoff.checkpoint.write")
    reads = capture.named("signoff.checkpoint.read")
    assert writes and reads
    for span in writes + reads:
        assert attributes(span)["signoff.checkpoint.thread_id"] == thread
    assert [attributes(r)["signoff.checkpoint.found"] for r in reads][-1] is True
    nothing_sealed(capture.spans)


async def test_the_service_continues_the_callers_trace(database_url: str) -> None:
    trace_id, parent = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    async with reviewer_service(database_url) as http:
        with captured() as capture:
            answer = await http.get(
                f"/v1/approvals/{uuid.uuid4()}",
                headers={"traceparent": f"00-{trace_id}-{parent}-01"},
            )
    assert answer.status_code == 401  # no token: the span is there all the same
    (span,) = [s for s in capture.spans if s.kind is SpanKind.SERVER]
    assert span.name == "GET /v1/approvals/{approval_id}"
    assert span.context.trace_id == int(trace_id, 16)
    assert span.parent is not None and span.parent.span_id == int(parent, 16)
    described = attributes(span)
    assert described["http.route"] == "/v1/approvals/{approval_id}"
    assert described["http.response.status_code"] == 401
    assert [s.name for s in capture.spans] == [span.name]  # no spans of dependencies
