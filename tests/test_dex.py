"""The Dex adapter: the Flow in a real `dex.Registry`, its handlers through the SDK's own
AsyncWorker dispatcher, the Step and RPC logic against the real database (crashes with real OS
processes and SIGKILL), and, when `DEX_SERVER_ADDRESS` is set, end to end on a live Dex server.

No Dex server can be installed on these machines, so the handler tests feed the SDK's
`AsyncWorkerDispatcher` the protobuf requests a server would send (`SdkWorker`, in
tests/support/dex_dispatch.py). That dispatcher, its codecs and the Registry are the SDK's, not
mocks; only the server is absent.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from dex import (
    AsyncClient,
    AsyncContext,
    AsyncWorker,
    BlobCache,
    BlobCacheConfig,
    ClientOptions,
    DexServiceError,
    FlowDefinitionError,
    PullWorkerOptions,
    Registry,
    Step,
    StepDecision,
    StepList,
    WorkerOptions,
    go_to,
    graceful_complete,
    open_blob_cache,
)
from dex.dexpb import dex_pb2 as pb

from adapters.dex import (
    DECISIONS,
    ApprovalNotForThisCall,
    ApprovalSignal,
    DecideRequest,
    DecideResult,
    DecisionConflict,
    DexTool,
    RuntimeNotBound,
    SignoffDex,
    ToolCallFlow,
    ToolCallRequest,
    ToolCallResult,
    ToolSpec,
    await_approval,
    call_tool,
    channel_key,
    decide_approval,
    decide_for_flow,
    retry_policy,
)
from adapters.dex import flow as dex_flow
from approvals import (
    ApprovalExpired,
    ApprovalPending,
    ApprovalPolicy,
    ApprovalStatus,
    ApprovalStore,
    Decision,
    DecisionKind,
    UnknownApproval,
)
from ledger.calls.model import CallContext, CallStatus, Effect, ToolCall
from ledger.calls.service import ToolLedger
from ledger.errors import UnknownCall
from ledger.journal import Journal
from ledger.store import Database

from .support.dex_dispatch import TIMER_FIRED, SdkWorker, next_steps
from .support.dex_workers import APPROVAL, REFUND_ARGS
from .support.processes import finish, kek_env, start_program

DEX_SERVER_ADDRESS = os.environ.get("DEX_SERVER_ADDRESS", "")
FIVE_MINUTES = ApprovalPolicy(expires_in=timedelta(minutes=5))


@pytest.fixture(scope="module")
async def side_effects(db: Database) -> None:
    async with db.connection() as conn:
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS dex_side_effects "
            "(flow_id text, call_id text, pid int, attempt int, key text)"
        )


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[BlobCache]:
    blob_cache = open_blob_cache(BlobCacheConfig(str(tmp_path / "dex-cache"), 1 << 20))
    yield blob_cache
    blob_cache.close()


def new_flow() -> str:
    return f"flow-{uuid.uuid4().hex[:10]}"


class Refunds:
    """A tool that counts its runs and refunds the amount it is given."""

    def __init__(self) -> None:
        self.calls: list[CallContext] = []

    async def __call__(self, args: dict[str, Any], context: CallContext) -> dict[str, Any]:
        self.calls.append(context)
        return {"refunded": args["amount"]}


async def decided_events(db: Database, approval_id: str) -> list[str]:
    events = await Journal(db).read_stream(f"approval:{approval_id}")
    return [e.type for e in events if e.type == "approval.decided"]


# -- the Flow in a real Registry --------------------------------------------------------------


class FollowUp(Step[ToolCallRequest]):
    """A user's own Step after the call."""

    async def execute(  # type: ignore[override]
        self, context: AsyncContext, input: ToolCallRequest
    ) -> StepDecision:
        return graceful_complete("followed up")


class RefundSession(ToolCallFlow):
    """A user's Flow built on the reusable Steps: continues into its own Step."""

    def __init__(self, runtime: SignoffDex | None = None) -> None:
        super().__init__(runtime, flow_type="RefundSession")
        self.follow_up = FollowUp()

    def get_steps(self) -> StepList[ToolCallRequest]:
        return super().get_steps().other_steps(self.follow_up)

    def after_tool_call(
        self, context: AsyncContext, request: ToolCallRequest, result: ToolCallResult
    ) -> StepDecision:
        return go_to(FollowUp, request)


def test_the_flow_builds_and_validates_in_a_real_registry() -> None:
    flow, session = ToolCallFlow(), RefundSession()
    registry = Registry([flow, session], allow_async_handlers=True)
    assert registry.flows == (flow, session)
    with pytest.raises(FlowDefinitionError, match="must be synchronous"):
        Registry([ToolCallFlow()])  # every handler is async: an AsyncWorker serves them


def test_wire_values_round_trip_through_the_registrys_codecs() -> None:
    codecs = Registry([ToolCallFlow()], allow_async_handlers=True).codec_registry
    values: list[object] = [
        ToolCallRequest("call/1", "refund", {"order": "A-1", "lines": [1, {"x": None}]}, "t2"),
        ToolCallResult("c", CallStatus.OUTCOME_UNKNOWN, {"a": [1]}, "lost", False, 1, "apr-1", "k"),
        DecideRequest("apr-1", "c", DecisionKind.EDIT, "alice", None, {"n": 2}),
        DecideResult("apr-1", ApprovalStatus.EDITED, duplicate=True, signalled=False),
        ApprovalSignal("apr-1", ApprovalStatus.APPROVED),
    ]
    for value in values:
        codec = codecs.resolve(type(value))
        assert codec.decode(codec.encode(value)) == value


def test_channel_keys_never_contain_a_slash_and_never_collide() -> None:
    ids = ["call_1", "a/b", "a%2Fb", "a%b", "/", "%", "toolu_01/x%y"]
    keys = [channel_key(i) for i in ids]
    assert all("/" not in k for k in keys)
    assert len(set(keys)) == len(ids)
    for key in keys:  # Dex accepts each as a ChannelMap instance
        DECISIONS.for_one(key)
        Registry.physical_name(DECISIONS.name, key)
    with pytest.raises(ValueError):
        channel_key(" ")


def test_the_retry_policy_follows_the_effect() -> None:
    assert retry_policy(Effect.READ).maximum_attempts == 3
    assert retry_policy(Effect.IDEMPOTENT_WRITE).maximum_attempts == 3
    assert retry_policy(Effect.SINGLE_ATTEMPT).maximum_attempts == 1


# -- the handlers, through the SDK's AsyncWorker dispatcher ------------------------------------


async def test_an_approved_call_through_the_sdk_dispatcher(
    store: ApprovalStore, ledger: ToolLedger, db: Database, cache: BlobCache
) -> None:
    refunds = Refunds()
    runtime = SignoffDex.of(
        store, ledger, DexTool(ToolSpec("refund", approval=FIVE_MINUTES), refunds)
    )
    worker = SdkWorker(ToolCallFlow(runtime), cache)
    flow_id, request = new_flow(), ToolCallRequest("call/1%", "refund", {"amount": 5}, "t1")

    start, _ = await worker.execute("StartToolCall", flow_id, request)
    assert next_steps(start) == ["AwaitToolApproval"]
    assert not start.step_decision.next_steps[0].step_options.skip_wait_for

    # wait_for records the request and waits on the call's channel instance or the expiry.
    waiting = (await worker.wait_for("AwaitToolApproval", flow_id, request)).waiting_condition
    assert waiting.waiting_condition_type == pb.WAITING_CONDITION_TYPE_ANY_COMPLETED
    [channel] = waiting.channel_conditions
    assert channel.channel_name == f"signoff_decisions/{quote('call%2F1%25', safe='')}"
    assert (channel.at_least, channel.at_most) == (1, 1)
    [timer] = waiting.timer_conditions
    assert 298 <= timer.duration_seconds <= 300
    [approval] = await store.find(run_id=flow_id)
    assert (approval.status, approval.call_id) == (ApprovalStatus.PENDING, "call/1%")

    # The decide RPC records in the store first, then publishes the wake-up.
    vote = DecideRequest.of(approval, Decision.approve(), "alice")
    result, published = await worker.decide(flow_id, vote)
    assert (result.status, result.duplicate, result.signalled) == (
        ApprovalStatus.APPROVED,
        False,
        True,
    )
    assert published == [ApprovalSignal(approval.approval_id, ApprovalStatus.APPROVED)]
    assert (await store.get(approval.approval_id)).status is ApprovalStatus.APPROVED

    # Delivered again while the wake-up is pending: no second decision, no second message.
    result, published = await worker.decide(flow_id, vote, pending=published)
    assert (result.duplicate, result.signalled, published) == (True, False, [])
    assert await decided_events(db, approval.approval_id) == ["approval.decided"]
    with pytest.raises(DecisionConflict, match="already approved"):
        await worker.decide(flow_id, DecideRequest.of(approval, Decision.reject("no"), "bob"))

    # Woken: the Step reads the store and moves to the call with the effect's retry policy.
    signal_ = ApprovalSignal(approval.approval_id, ApprovalStatus.APPROVED)
    woken, _ = await worker.execute(
        "AwaitToolApproval", flow_id, request, worker.woken_by(request.call_id, signal_)
    )
    [move] = woken.step_decision.next_steps
    options = move.step_options
    assert move.step_type == "CallTool"
    assert options.execute_retry_policy.maximum_attempts == 1
    assert options.execute_durability_override == pb.STEP_DURABILITY_SYNC
    assert options.execute_failure_policy == (
        pb.EXECUTE_METHOD_FAILURE_POLICY_PROCEED_TO_CONFIGURED_STEP
    )
    assert options.execute_failure_proceed_step_type == "SettleToolCall"
    assert options.execute_failure_proceed_step_options.execute_retry_policy.maximum_attempts == 3

    # The call runs once, with the idempotency key <flowId>/<turnId>/<toolCallId>.
    done, _ = await worker.execute("CallTool", flow_id, request)
    close = done.step_decision.close_decision
    assert close.close_decision_type == pb.CLOSE_DECISION_TYPE_GRACEFUL_COMPLETE
    output = worker.decode(close.close_input, ToolCallResult)
    assert (output.status, output.result, output.replayed) == (
        CallStatus.SUCCEEDED,
        {"refunded": 5},
        False,
    )
    assert output.idempotency_key == f"{flow_id}/t1/call/1%"
    assert [c.idempotency_key for c in refunds.calls] == [output.idempotency_key]

    # Dex runs the Step again (a lost acknowledgement) or the settle Step: replayed.
    for step in ("CallTool", "SettleToolCall"):
        again, _ = await worker.execute(step, flow_id, request)
        replay = worker.decode(again.step_decision.close_decision.close_input, ToolCallResult)
        assert (replay.status, replay.replayed) == (CallStatus.SUCCEEDED, True)
    assert len(refunds.calls) == 1
    consumed = await store.get(approval.approval_id)
    assert consumed.consumed_by == f"{flow_id}/call/1%"

    # A late repeated delivery after the decision was used publishes nothing.
    result, published = await worker.decide(flow_id, vote)
    assert (result.duplicate, published) == (True, [])


async def test_the_expiry_timer_path_through_the_sdk_dispatcher_denies_the_call(
    store: ApprovalStore, ledger: ToolLedger, cache: BlobCache
) -> None:
    refunds = Refunds()
    policy = ApprovalPolicy(expires_in=timedelta(seconds=1))
    runtime = SignoffDex.of(store, ledger, DexTool(ToolSpec("refund", approval=policy), refunds))
    worker = SdkWorker(ToolCallFlow(runtime), cache)
    flow_id, request = new_flow(), ToolCallRequest("c1", "refund", {"amount": 7})

    waiting = (await worker.wait_for("AwaitToolApproval", flow_id, request)).waiting_condition
    assert [t.duration_seconds for t in waiting.timer_conditions] == [1]
    await asyncio.sleep(1.1)  # what is tested: the expiry passes by the server's clock
    fired, _ = await worker.execute("AwaitToolApproval", flow_id, request, TIMER_FIRED)
    assert next_steps(fired) == ["CallTool"]
    done, _ = await worker.execute("CallTool", flow_id, request)
    output = worker.decode(done.step_decision.close_decision.close_input, ToolCallResult)
    assert output.status is CallStatus.DENIED
    assert output.error is not None and "expired" in output.error
    assert refunds.calls == []
    [approval] = await store.find(run_id=flow_id)
    assert (approval.status, approval.consumed) == (ApprovalStatus.EXPIRED, True)


async def test_a_read_goes_straight_to_the_call_with_three_attempts(
    store: ApprovalStore, ledger: ToolLedger, cache: BlobCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def slow_lookup(args: dict[str, Any], context: CallContext) -> str:
        await asyncio.sleep(0.3)
        return "delivered"

    runtime = SignoffDex.of(store, ledger, DexTool(ToolSpec("lookup", Effect.READ), slow_lookup))
    worker = SdkWorker(ToolCallFlow(runtime), cache)
    flow_id, request = new_flow(), ToolCallRequest("c1", "lookup", {"order": "A-1"})
    start, _ = await worker.execute("StartToolCall", flow_id, request)
    [move] = start.step_decision.next_steps
    assert (move.step_type, move.step_options.execute_retry_policy.maximum_attempts) == (
        "CallTool",
        3,
    )
    monkeypatch.setattr(dex_flow, "HEARTBEAT_SECONDS", 0.05)
    done, frames = await worker.execute("CallTool", flow_id, request)
    assert any(f.HasField("heartbeat") for f in frames), "a running call heartbeats"
    output = worker.decode(done.step_decision.close_decision.close_input, ToolCallResult)
    assert (output.status, output.result) == (CallStatus.SUCCEEDED, "delivered")
    assert await store.find(run_id=flow_id) == [], "no approval asked"


async def test_a_flow_without_a_runtime_refuses_to_run(cache: BlobCache) -> None:
    worker = SdkWorker(ToolCallFlow(), cache)
    with pytest.raises(RuntimeNotBound, match="without a SignoffDex runtime"):
        await worker.execute("StartToolCall", new_flow(), ToolCallRequest("c", "t", {}))


async def test_a_decision_made_without_the_rpc_is_seen_at_the_next_recheck(
    store: ApprovalStore, ledger: ToolLedger, cache: BlobCache
) -> None:
    runtime = SignoffDex.of(
        store, ledger, DexTool(ToolSpec("refund", approval=FIVE_MINUTES), Refunds())
    )
    flow = ToolCallFlow(runtime, recheck_every=timedelta(seconds=60))
    worker = SdkWorker(flow, cache)
    flow_id, request = new_flow(), ToolCallRequest("c1", "refund", {"amount": 2})
    waiting = (await worker.wait_for("AwaitToolApproval", flow_id, request)).waiting_condition
    assert [t.duration_seconds for t in waiting.timer_conditions] == [60], "the sooner timer"
    rechecked, _ = await worker.execute("AwaitToolApproval", flow_id, request, TIMER_FIRED)
    assert next_steps(rechecked) == ["AwaitToolApproval"], "still pending: wait again"
    [approval] = await store.find(run_id=flow_id)
    await store.decide(approval.approval_id, Decision.approve(), "alice")  # e.g. the CLI
    rechecked, _ = await worker.execute("AwaitToolApproval", flow_id, request, TIMER_FIRED)
    assert next_steps(rechecked) == ["CallTool"]

    # No expiry and no re-check: only the wake-up ends the wait.
    forever = DexTool(ToolSpec("refund", approval=ApprovalPolicy(expires_in=None)), Refunds())
    never = SdkWorker(
        ToolCallFlow(SignoffDex.of(store, ledger, forever), recheck_every=None), cache
    )
    waiting = (await never.wait_for("AwaitToolApproval", new_flow(), request)).waiting_condition
    assert waiting.waiting_condition_type == pb.WAITING_CONDITION_TYPE_ALL_COMPLETED
    assert (len(waiting.channel_conditions), len(waiting.timer_conditions)) == (1, 0)
    with pytest.raises(ValueError, match="whole seconds"):
        ToolCallFlow(runtime, recheck_every=timedelta(milliseconds=1500))


async def test_decide_approval_records_in_the_store_before_the_rpc(
    store: ApprovalStore, db: Database, cache: BlobCache
) -> None:
    flow = ToolCallFlow()  # a Client-only Flow: the helper needs no runtime
    registry = Registry([flow], allow_async_handlers=True)
    unreachable = ClientOptions(server_address="127.0.0.1:1")  # nothing listens there
    flow_id = new_flow()
    approval = await store.request(
        run_id=flow_id, tool="refund", args={"amount": 9}, call_id="c/1", requested_by="agent"
    )
    async with AsyncClient(registry, cache, unreachable) as client:
        for _ in range(2):  # Dex is down: the decision is in the store all the same, once
            with pytest.raises(DexServiceError) as caught:
                await decide_approval(
                    client,
                    flow,
                    store,
                    approval.approval_id,
                    Decision.approve(),
                    "alice",
                    attempts=2,
                    backoff_seconds=0.01,
                )
            assert getattr(caught.value.code, "name", "") == "UNAVAILABLE"
        assert (await store.get(approval.approval_id)).status is ApprovalStatus.APPROVED
        assert await decided_events(db, approval.approval_id) == ["approval.decided"]
        with pytest.raises(DecisionConflict):  # refused before Dex is contacted
            await decide_approval(
                client, flow, store, approval.approval_id, Decision.reject(), "bob"
            )


# -- the logic against the database ------------------------------------------------------------


async def test_the_tool_gets_the_idempotency_key_flow_turn_call(
    store: ApprovalStore, ledger: ToolLedger
) -> None:
    refunds, flow_id = Refunds(), new_flow()
    tool = DexTool(ToolSpec("refund", Effect.IDEMPOTENT_WRITE), refunds)
    request = ToolCallRequest("call_7", "refund", {"amount": 1}, turn_id="turn-3")
    result = await call_tool(ledger, store, flow_id, request, tool)
    expected = f"{flow_id}/turn-3/call_7"
    assert expected == ToolCall(flow_id, "call_7", "refund", {}, "turn-3").idempotency_key
    assert [c.idempotency_key for c in refunds.calls] == [expected]
    assert result.idempotency_key == expected
    assert (await ledger.get(flow_id, "call_7")).idempotency_key == expected


@pytest.mark.parametrize(
    "decision",
    [
        Decision.approve(),
        Decision.reject("over the limit"),
        Decision.edit({"amount": 3}),
        Decision.respond("ask the customer first"),
    ],
    ids=["approve", "reject", "edit", "respond"],
)
async def test_the_same_decision_delivered_twice_is_one_decision(
    store: ApprovalStore, db: Database, decision: Decision
) -> None:
    flow_id = new_flow()
    approval = await store.request(
        run_id=flow_id, tool="refund", args={"amount": 9}, call_id="c1", requested_by="agent"
    )
    request = DecideRequest.of(approval, decision, "alice")
    first = await decide_for_flow(store, flow_id, request)
    second = await decide_for_flow(store, flow_id, request)
    assert (first.duplicate, second.duplicate) == (False, True)
    assert first.status is second.status and first.status.final
    assert await decided_events(db, approval.approval_id) == ["approval.decided"]


async def test_a_different_second_decision_is_a_clear_error(
    store: ApprovalStore, db: Database
) -> None:
    flow_id = new_flow()
    approval = await store.request(
        run_id=flow_id, tool="refund", args={"amount": 9}, call_id="c1", requested_by="agent"
    )
    await decide_for_flow(store, flow_id, DecideRequest.of(approval, Decision.approve(), "alice"))
    for other in (Decision.reject("no"), Decision.edit({"amount": 1})):
        with pytest.raises(DecisionConflict) as caught:
            await decide_for_flow(store, flow_id, DecideRequest.of(approval, other, "bob"))
        assert (caught.value.recorded, caught.value.attempted) == ("approved", other.kind)
        assert caught.value.approval_id == approval.approval_id
    assert (await store.get(approval.approval_id)).status is ApprovalStatus.APPROVED
    assert await decided_events(db, approval.approval_id) == ["approval.decided"]

    rejected = await store.request(
        run_id=flow_id, tool="refund", args={"amount": 9}, call_id="c2", requested_by="agent"
    )
    no = DecideRequest.of(rejected, Decision.reject("too much"), "alice")
    await decide_for_flow(store, flow_id, no)
    with pytest.raises(DecisionConflict):  # another reason is another decision
        await decide_for_flow(
            store, flow_id, DecideRequest.of(rejected, Decision.reject("fraud"), "alice")
        )


async def test_the_same_decision_from_another_reviewer_is_a_conflict_not_a_repeat(
    store: ApprovalStore, db: Database
) -> None:
    flow_id = new_flow()
    approval = await store.request(
        run_id=flow_id, tool="refund", args={"amount": 9}, call_id="c1", requested_by="agent"
    )
    await decide_for_flow(store, flow_id, DecideRequest.of(approval, Decision.approve(), "alice"))
    with pytest.raises(DecisionConflict, match="already approved"):
        await decide_for_flow(store, flow_id, DecideRequest.of(approval, Decision.approve(), "bob"))
    assert (await store.get(approval.approval_id)).decided_by == ("alice",)
    assert await decided_events(db, approval.approval_id) == ["approval.decided"]


async def test_a_repeated_quorum_vote_counts_once(store: ApprovalStore, db: Database) -> None:
    flow_id = new_flow()
    approval = await store.request(
        run_id=flow_id,
        tool="refund",
        args={"amount": 900},
        call_id="c1",
        requested_by="agent",
        policy=ApprovalPolicy(quorum=2, any_reviewer=True),
    )
    alice = DecideRequest.of(approval, Decision.approve(), "alice")
    assert (await decide_for_flow(store, flow_id, alice)).status is ApprovalStatus.PENDING
    again = await decide_for_flow(store, flow_id, alice)
    assert (again.status, again.duplicate) == (ApprovalStatus.PENDING, True)
    bob = DecideRequest.of(approval, Decision.approve(), "bob")
    assert (await decide_for_flow(store, flow_id, bob)).status is ApprovalStatus.APPROVED
    assert len(await decided_events(db, approval.approval_id)) == 2


async def test_a_decision_for_another_flow_or_call_is_refused(store: ApprovalStore) -> None:
    flow_id = new_flow()
    approval = await store.request(
        run_id=flow_id, tool="refund", args={"amount": 9}, call_id="c1", requested_by="agent"
    )
    request = DecideRequest.of(approval, Decision.approve(), "alice")
    with pytest.raises(ApprovalNotForThisCall):
        await decide_for_flow(store, new_flow(), request)
    with pytest.raises(UnknownApproval):
        await decide_for_flow(store, flow_id, DecideRequest("apr-x", "c1", request.kind, "a"))
    wrong_call = DecideRequest(approval.approval_id, "c2", request.kind, "alice")
    with pytest.raises(ApprovalNotForThisCall):
        await decide_for_flow(store, flow_id, wrong_call)
    assert (await store.get(approval.approval_id)).status is ApprovalStatus.PENDING


async def test_expiry_on_the_timer_path_denies_the_call(
    store: ApprovalStore, ledger: ToolLedger
) -> None:
    refunds, flow_id = Refunds(), new_flow()
    tool = DexTool(
        ToolSpec("refund", approval=ApprovalPolicy(expires_in=timedelta(seconds=1))), refunds
    )
    request = ToolCallRequest("c1", "refund", {"amount": 4})
    assert tool.spec.approval is not None
    state = await await_approval(store, flow_id, request, tool.spec)
    assert (state.ready, state.timer, state.channel_key) == (False, timedelta(seconds=1), "c1")
    approval = await store.get(state.approval_id)
    assert approval.expires_at is not None
    early = approval.expires_at - timedelta(milliseconds=200)  # Dex's clock ran ahead
    state = await await_approval(store, flow_id, request, tool.spec, now=early)
    assert (state.ready, state.timer) == (False, timedelta(seconds=1))
    await asyncio.sleep(1.1)  # what is tested: the expiry passes by the server's clock
    state = await await_approval(store, flow_id, request, tool.spec)
    assert (state.ready, state.status) == (True, ApprovalStatus.PENDING)

    result = await call_tool(ledger, store, flow_id, request, tool)
    assert result.status is CallStatus.DENIED and refunds.calls == []
    expired = await store.get(state.approval_id)
    assert (expired.status, expired.consumed_by) == (ApprovalStatus.EXPIRED, f"{flow_id}/c1")
    late = DecideRequest.of(expired, Decision.approve(), "alice")
    with pytest.raises(DecisionConflict, match="already expired"):
        await decide_for_flow(store, flow_id, late)


async def test_a_decision_after_the_expiry_is_refused(store: ApprovalStore) -> None:
    flow_id = new_flow()
    approval = await store.request(
        run_id=flow_id,
        tool="refund",
        args={"amount": 9},
        call_id="c1",
        requested_by="agent",
        policy=ApprovalPolicy(expires_in=timedelta(seconds=0.2)),
    )
    await asyncio.sleep(0.3)  # what is tested: the expiry passes by the server's clock
    request = DecideRequest.of(approval, Decision.approve(), "alice")
    with pytest.raises(ApprovalExpired):
        await decide_for_flow(store, flow_id, request)
    with pytest.raises(DecisionConflict, match="already expired"):
        await decide_for_flow(store, flow_id, request)


async def test_a_call_whose_approval_is_pending_does_not_run(
    store: ApprovalStore, ledger: ToolLedger
) -> None:
    refunds, flow_id = Refunds(), new_flow()
    tool = DexTool(ToolSpec("refund", approval=FIVE_MINUTES), refunds)
    with pytest.raises(ApprovalPending):
        await call_tool(ledger, store, flow_id, ToolCallRequest("c1", "refund", {}), tool)
    with pytest.raises(UnknownCall):
        await ledger.get(flow_id, "c1")
    assert refunds.calls == []


async def test_an_unknown_tool_is_recorded_as_failed(
    store: ApprovalStore, ledger: ToolLedger
) -> None:
    runtime, flow_id = SignoffDex.of(store, ledger), new_flow()
    request = ToolCallRequest("c1", "teleport", {"to": "mars"})
    result = await call_tool(ledger, store, flow_id, request, runtime.tool("teleport"))
    assert result.status is CallStatus.FAILED
    assert result.error == "the agent has no tool named 'teleport'"
    assert (await ledger.get(flow_id, "c1")).status is CallStatus.FAILED


# -- real processes ----------------------------------------------------------------------------


async def start_call(
    database_url: str, flow_id: str, effect: Effect, *, sleep: float = 0.0, approval: bool = False
) -> asyncio.subprocess.Process:
    return await start_program(
        "tests.support.dex_workers",
        "call",
        database_url,
        flow_id,
        "c1",
        str(effect),
        str(sleep),
        "1.0",
        "yes" if approval else "no",
        env=kek_env(),
    )


async def side_effect_keys(db: Database, flow_id: str) -> list[str]:
    async with db.connection() as conn:
        rows = await conn.fetch("SELECT key FROM dex_side_effects WHERE flow_id = $1", flow_id)
    return [r["key"] for r in rows]


async def kill_while_running(
    database_url: str, flow_id: str, effect: Effect, *, approval: bool = False
) -> None:
    victim = await start_call(database_url, flow_id, effect, sleep=60, approval=approval)
    assert victim.stdout is not None
    assert (await asyncio.wait_for(victim.stdout.readline(), 30)).strip() == b"started"
    victim.send_signal(signal.SIGKILL)
    await victim.wait()


@pytest.mark.usefixtures("side_effects")
async def test_sigkill_during_a_single_attempt_write_is_outcome_unknown_and_not_rerun(
    database_url: str, db: Database, store: ApprovalStore
) -> None:
    flow_id = new_flow()
    approval = await store.request(
        run_id=flow_id,
        tool="refund",
        args=REFUND_ARGS,
        call_id="c1",
        requested_by="agent",
        policy=APPROVAL,
    )
    await decide_for_flow(store, flow_id, DecideRequest.of(approval, Decision.approve(), "alice"))
    await kill_while_running(database_url, flow_id, Effect.SINGLE_ATTEMPT, approval=True)
    # Dex moves the Step to another Worker (CallTool has one attempt; SettleToolCall runs it).
    successor = await finish(await start_call(database_url, flow_id, Effect.SINGLE_ATTEMPT))
    outcome = json.loads(successor.splitlines()[-1])
    assert (outcome["status"], outcome["approval_id"]) == (
        "outcome_unknown",
        approval.approval_id,
    )
    assert "may or may not have taken effect" in outcome["error"]
    assert await side_effect_keys(db, flow_id) == [f"{flow_id}/t1/c1"], "not run again"
    used = await store.get(approval.approval_id)
    assert used.consumed_by == f"{flow_id}/c1"


@pytest.mark.usefixtures("side_effects")
async def test_sigkill_during_a_read_runs_it_again_and_it_succeeds(
    database_url: str, db: Database
) -> None:
    flow_id = new_flow()
    await kill_while_running(database_url, flow_id, Effect.READ)
    successor = await finish(await start_call(database_url, flow_id, Effect.READ))
    outcome = json.loads(successor.splitlines()[-1])
    assert (outcome["status"], outcome["attempts"], outcome["replayed"]) == ("succeeded", 2, False)
    assert await side_effect_keys(db, flow_id) == [f"{flow_id}/t1/c1"] * 2, "same key both times"


async def deliver(
    database_url: str, flow_id: str, approval_id: str, kind: str, reviewer: str
) -> asyncio.subprocess.Process:
    return await start_program(
        "tests.support.dex_workers",
        "decide",
        database_url,
        flow_id,
        "c1",
        approval_id,
        kind,
        reviewer,
        env=kek_env(),
    )


@pytest.mark.usefixtures("ring")
async def test_one_decision_delivered_by_many_processes_is_recorded_once(
    database_url: str, db: Database, store: ApprovalStore
) -> None:
    flow_id = new_flow()
    approval = await store.request(
        run_id=flow_id, tool="refund", args={"amount": 1}, call_id="c1", requested_by="agent"
    )
    deliveries = [
        await deliver(database_url, flow_id, approval.approval_id, "approve", "alice")
        for _ in range(4)
    ]
    results = [json.loads((await finish(d)).splitlines()[-1]) for d in deliveries]
    assert {r["status"] for r in results} == {"approved"}
    assert sorted(r["duplicate"] for r in results) == [False, True, True, True]
    assert await decided_events(db, approval.approval_id) == ["approval.decided"]


@pytest.mark.usefixtures("ring")
async def test_conflicting_decisions_from_two_processes_one_wins_one_is_refused(
    database_url: str, db: Database, store: ApprovalStore
) -> None:
    flow_id = new_flow()
    approval = await store.request(
        run_id=flow_id, tool="refund", args={"amount": 1}, call_id="c1", requested_by="agent"
    )
    approve = await deliver(database_url, flow_id, approval.approval_id, "approve", "alice")
    reject = await deliver(database_url, flow_id, approval.approval_id, "reject", "bob")
    results = [json.loads((await finish(p)).splitlines()[-1]) for p in (approve, reject)]
    winner = (await store.get(approval.approval_id)).status
    assert winner in (ApprovalStatus.APPROVED, ApprovalStatus.REJECTED)
    assert sorted(results, key=lambda r: "error" in r) == [
        {"status": str(winner), "duplicate": False},
        {"error": "DecisionConflict", "recorded": str(winner)},
    ]
    assert await decided_events(db, approval.approval_id) == ["approval.decided"]


# -- a live Dex server -------------------------------------------------------------------------


async def wait_for_pending(store: ApprovalStore, flow_id: str, within: float = 60) -> str:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        found = await store.find(run_id=flow_id, status=ApprovalStatus.PENDING)
        if found:
            return found[0].approval_id
        await asyncio.sleep(0.2)
    raise AssertionError(f"flow {flow_id} asked for no approval within {within} s")


@pytest.mark.skipif(
    not DEX_SERVER_ADDRESS,
    reason="needs a live Dex server: set DEX_SERVER_ADDRESS=host:port (none can be installed "
    "on these machines, so this test has not run here)",
)
async def test_end_to_end_on_a_live_dex_server(
    store: ApprovalStore, ledger: ToolLedger, cache: BlobCache
) -> None:
    refunds = Refunds()
    runtime = SignoffDex.of(
        store,
        ledger,
        DexTool(ToolSpec("refund", approval=FIVE_MINUTES), refunds),
        DexTool(
            ToolSpec("void", approval=ApprovalPolicy(expires_in=timedelta(seconds=2))), refunds
        ),
    )
    flow = ToolCallFlow(runtime, flow_type=f"SignoffToolCallTest{uuid.uuid4().hex[:6]}")
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
        approved, expired = new_flow(), new_flow()
        request = ToolCallRequest("c1", "refund", {"amount": 12}, turn_id="t1")
        await client.start_flow(flow, approved, request)
        await client.start_flow(flow, expired, ToolCallRequest("c1", "void", {"amount": 1}))

        approval_id = await wait_for_pending(store, approved)
        first = await decide_approval(client, flow, store, approval_id, Decision.approve(), "alice")
        again = await decide_approval(client, flow, store, approval_id, Decision.approve(), "alice")
        assert (first.duplicate, again.duplicate) == (False, True)
        with pytest.raises(DecisionConflict):
            await decide_approval(client, flow, store, approval_id, Decision.reject(), "bob")

        done = (await client.wait_for_flow(approved, timedelta(seconds=60))).single_output(
            ToolCallResult
        )
        assert (done.status, done.result, done.idempotency_key) == (
            CallStatus.SUCCEEDED,
            {"refunded": 12},
            f"{approved}/t1/c1",
        )
        denied = (await client.wait_for_flow(expired, timedelta(seconds=60))).single_output(
            ToolCallResult
        )
        assert denied.status is CallStatus.DENIED
        assert len(refunds.calls) == 1
    finally:
        await worker.stop()
        await serving
        await client.close()
