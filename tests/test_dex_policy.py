"""The Dex adapter under a published policy set: every Step that decides whether to ask judges
the call through the policy decision point the runtime builds on its own database. The Steps
run through the SDK's AsyncWorker dispatcher (as in test_dex.py) against a database of their
own (a published set governs every call of its database)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from dex import BlobCache, BlobCacheConfig, open_blob_cache
from dex.dexpb import dex_pb2 as pb

from adapters.dex import (
    DexTool,
    SignoffDex,
    ToolCallFlow,
    ToolCallRequest,
    ToolCallResult,
    ToolSpec,
)
from approvals import ApprovalPolicy, ApprovalStatus, Decision
from ledger.calls.model import CallContext, CallStatus, Effect
from ledger.journal import Journal
from ledger.store import Database

from .support.dex_dispatch import TIMER_FIRED, SdkWorker, next_steps
from .support.policies import ADMIN, TOOLS, PolicyWorld, policy_world
from .test_policy_point import REFUND_TIERS

REFUND_SCHEMA = next(t.args_schema for t in TOOLS if t.name == "refund")
NOTED_SCHEMA = {
    **REFUND_SCHEMA,
    "properties": {**REFUND_SCHEMA["properties"], "note": {"type": "string"}},
}
FIVE_MINUTES = ApprovalPolicy(expires_in=timedelta(minutes=5))
REQUESTER = "agent-7"


@pytest.fixture
async def world(server_url: str) -> AsyncIterator[PolicyWorld]:
    async with policy_world(server_url, prefix="signoff_dex_policy") as w:
        yield w


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[BlobCache]:
    blob_cache = open_blob_cache(BlobCacheConfig(str(tmp_path / "dex-cache"), 1 << 20))
    yield blob_cache
    blob_cache.close()


class Refunds:
    """A refund tool that counts its runs."""

    def __init__(self) -> None:
        self.calls: list[CallContext] = []

    async def __call__(self, args: dict[str, Any], context: CallContext) -> dict[str, Any]:
        self.calls.append(context)
        return {"refunded": args["amount"]}


@pytest.fixture
async def refunds(world: PolicyWorld) -> AsyncIterator[tuple[SignoffDex, Refunds]]:
    """The runtime a Worker builds: no point given, so it builds and closes its own."""
    tool = Refunds()
    runtime = SignoffDex.of(
        world.store, world.ledger, DexTool(ToolSpec("refund", Effect.SINGLE_ATTEMPT), tool)
    )
    yield runtime, tool
    await runtime.close()


def refund(amount: int) -> tuple[str, ToolCallRequest]:
    flow_id = f"flow-{uuid.uuid4().hex[:10]}"
    return flow_id, ToolCallRequest("c1", "refund", {"amount": amount}, requested_by=REQUESTER)


def result_of(worker: SdkWorker, response: pb.InvokeExecuteMethodResponse) -> ToolCallResult:
    return worker.decode(response.step_decision.close_decision.close_input, ToolCallResult)


async def call_started(db: Database, flow_id: str, call_id: str) -> dict[str, Any]:
    events = await Journal(db).read_stream(f"call:{flow_id}/{call_id}")
    [started] = [e for e in events if e.type == "call.started"]
    data: dict[str, Any] = json.loads(started.data_json)
    return data


async def approval_requested(db: Database, approval_id: str) -> dict[str, Any]:
    [requested, *_] = await Journal(db).read_stream(f"approval:{approval_id}")
    assert requested.type == "approval.requested"
    data: dict[str, Any] = json.loads(requested.data_json)
    return data


async def test_a_small_refund_runs_without_waiting_and_records_the_allow(
    world: PolicyWorld, refunds: tuple[SignoffDex, Refunds], cache: BlobCache
) -> None:
    await world.sets.publish(REFUND_TIERS, by=ADMIN)
    runtime, tool = refunds
    worker = SdkWorker(ToolCallFlow(runtime), cache)
    flow_id, request = refund(20)

    start, _ = await worker.execute("StartToolCall", flow_id, request)
    assert next_steps(start) == ["CallTool"]
    done, _ = await worker.execute("CallTool", flow_id, request)
    output = result_of(worker, done)
    assert (output.status, output.result, output.approval_id) == (
        CallStatus.SUCCEEDED,
        {"refunded": 20},
        None,
    )
    assert len(tool.calls) == 1
    assert await world.store.find(run_id=flow_id) == [], "nobody was asked"
    started = await call_started(world.db, flow_id, "c1")
    assert started["policy_decision"]["outcome"] == "allow"
    assert started["policy_decision"]["policies"] == ["refund-small"]


async def test_a_middle_refund_waits_for_a_support_lead_then_runs_once(
    world: PolicyWorld, refunds: tuple[SignoffDex, Refunds], cache: BlobCache
) -> None:
    await world.sets.publish(REFUND_TIERS, by=ADMIN)
    runtime, tool = refunds
    worker = SdkWorker(ToolCallFlow(runtime), cache)
    flow_id, request = refund(80)

    start, _ = await worker.execute("StartToolCall", flow_id, request)
    assert next_steps(start) == ["AwaitToolApproval"]
    waiting = (await worker.wait_for("AwaitToolApproval", flow_id, request)).waiting_condition
    assert len(waiting.channel_conditions) == 1
    [approval] = await world.store.find(run_id=flow_id)
    assert approval.status is ApprovalStatus.PENDING
    assert approval.policy.approvers == frozenset({"group:support-lead"})
    assert approval.requested_by == REQUESTER
    requested = await approval_requested(world.db, approval.approval_id)
    assert requested["policy_decision"]["policies"] == ["refund-lead"]

    # Dex runs the wait again (a lost acknowledgement) and re-checks: the same approval, and
    # the call waits on.
    await worker.wait_for("AwaitToolApproval", flow_id, request)
    rechecked, _ = await worker.execute("AwaitToolApproval", flow_id, request, TIMER_FIRED)
    assert next_steps(rechecked) == ["AwaitToolApproval"]
    assert [a.approval_id for a in await world.store.find(run_id=flow_id)] == [approval.approval_id]
    assert tool.calls == []

    await world.store.decide(approval.approval_id, Decision.approve(), "alice")
    woken, _ = await worker.execute("AwaitToolApproval", flow_id, request, TIMER_FIRED)
    assert next_steps(woken) == ["CallTool"]
    done, _ = await worker.execute("CallTool", flow_id, request)
    output = result_of(worker, done)
    assert (output.status, output.approval_id) == (CallStatus.SUCCEEDED, approval.approval_id)
    for step in ("CallTool", "SettleToolCall"):  # run again by Dex: replayed
        again, _ = await worker.execute(step, flow_id, request)
        assert (result_of(worker, again).status, result_of(worker, again).replayed) == (
            CallStatus.SUCCEEDED,
            True,
        )
    assert len(tool.calls) == 1
    assert (await world.store.get(approval.approval_id)).consumed_by == f"{flow_id}/c1"
    started = await call_started(world.db, flow_id, "c1")
    assert started["policy_decision"]["outcome"] == "approval"


async def test_a_large_refund_never_runs_and_the_requester_reads_why(
    world: PolicyWorld, refunds: tuple[SignoffDex, Refunds], cache: BlobCache
) -> None:
    await world.sets.publish(REFUND_TIERS, by=ADMIN)
    runtime, tool = refunds
    worker = SdkWorker(ToolCallFlow(runtime), cache)
    flow_id, request = refund(900)

    start, _ = await worker.execute("StartToolCall", flow_id, request)
    assert next_steps(start) == ["CallTool"], "a denial waits for nobody"
    done, _ = await worker.execute("CallTool", flow_id, request)
    output = result_of(worker, done)
    assert (output.status, output.error, output.approval_id) == (
        CallStatus.DENIED,
        "refunds above 500 are refused",
        None,
    )
    again, _ = await worker.execute("CallTool", flow_id, request)
    assert result_of(worker, again).replayed
    assert tool.calls == []
    assert await world.store.find(run_id=flow_id) == []
    started = await call_started(world.db, flow_id, "c1")
    assert started["policy_decision"]["policies"] == ["refund-cap"]


async def test_a_set_published_while_a_call_waits_governs_it_when_it_resumes(
    world: PolicyWorld, refunds: tuple[SignoffDex, Refunds], cache: BlobCache
) -> None:
    await world.sets.publish(REFUND_TIERS, by=ADMIN)
    runtime, tool = refunds
    worker = SdkWorker(ToolCallFlow(runtime), cache)
    flow_id, request = refund(80)
    await worker.wait_for("AwaitToolApproval", flow_id, request)
    [approval] = await world.store.find(run_id=flow_id)

    stricter = REFUND_TIERS.replace("amount <= 500", "amount <= 60").replace(
        "amount > 500", "amount > 60"
    )
    await world.sets.publish(stricter, by=ADMIN)
    await world.store.decide(approval.approval_id, Decision.approve(), "alice")  # too late
    woken, _ = await worker.execute("AwaitToolApproval", flow_id, request, TIMER_FIRED)
    assert next_steps(woken) == ["CallTool"]
    done, _ = await worker.execute("CallTool", flow_id, request)
    output = result_of(worker, done)
    assert (output.status, output.error) == (CallStatus.DENIED, "refunds above 500 are refused")
    assert tool.calls == []
    assert not (await world.store.get(approval.approval_id)).consumed, "the approval is not used"


async def test_without_a_published_set_the_tools_own_approval_waits_as_before(
    world: PolicyWorld, cache: BlobCache
) -> None:
    tool = Refunds()
    spec = ToolSpec("refund", Effect.SINGLE_ATTEMPT, approval=FIVE_MINUTES)
    runtime = SignoffDex.of(world.store, world.ledger, DexTool(spec, tool, NOTED_SCHEMA))
    assert runtime.policy is not None and runtime.owns_policy
    worker = SdkWorker(ToolCallFlow(runtime), cache)
    try:
        flow_id, request = refund(20)
        start, _ = await worker.execute("StartToolCall", flow_id, request)
        assert next_steps(start) == ["AwaitToolApproval"]
        waiting = (await worker.wait_for("AwaitToolApproval", flow_id, request)).waiting_condition
        assert [t.duration_seconds for t in waiting.timer_conditions] == [300]
        [approval] = await world.store.find(run_id=flow_id)
        assert approval.policy.expires_in == FIVE_MINUTES.expires_in
        assert "policy_decision" not in await approval_requested(world.db, approval.approval_id)

        await world.store.decide(approval.approval_id, Decision.approve(), "alice")
        woken, _ = await worker.execute("AwaitToolApproval", flow_id, request, TIMER_FIRED)
        assert next_steps(woken) == ["CallTool"]
        done, _ = await worker.execute("CallTool", flow_id, request)
        assert result_of(worker, done).status is CallStatus.SUCCEEDED
        assert len(tool.calls) == 1
        assert "policy_decision" not in await call_started(world.db, flow_id, "c1")
        registered = await world.sets.registered()
        assert registered["refund"].args_schema == NOTED_SCHEMA, "the Dex tool's schema"
    finally:
        await runtime.close()


async def test_a_call_routed_before_a_set_asked_for_approval_goes_back_to_wait(
    world: PolicyWorld, refunds: tuple[SignoffDex, Refunds], cache: BlobCache
) -> None:
    runtime, tool = refunds
    worker = SdkWorker(ToolCallFlow(runtime), cache)
    flow_id, request = refund(80)
    start, _ = await worker.execute("StartToolCall", flow_id, request)
    assert next_steps(start) == ["CallTool"], "no set yet: the tool's own rule runs it"

    await world.sets.publish(REFUND_TIERS, by=ADMIN)
    moved, _ = await worker.execute("CallTool", flow_id, request)
    assert next_steps(moved) == ["AwaitToolApproval"]
    [approval] = await world.store.find(run_id=flow_id)
    assert approval.policy.approvers == frozenset({"group:support-lead"})
    assert tool.calls == []
