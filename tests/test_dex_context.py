"""What led to a call, through Dex: a ToolCallFlow's input may carry the agent's reason and the
user's last message (Dex's own codecs, through the SDK's dispatcher); an agent session reads
them, with the tool's argument schema, from its encrypted checkpoint, so Dex never holds them.
Sealed in the approval request, opened by a reveal."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from dex import BlobCache
from langchain_core.messages import AIMessage

from adapters.dex import DexTool, SignoffDex, ToolCallFlow, ToolCallRequest, ToolSpec
from approvals import ApprovalPolicy, ApprovalStore, RequestContext
from ledger.calls.model import CallContext
from ledger.calls.service import ToolLedger

from .support.agents import Harness, Kind
from .support.dex_dispatch import SdkWorker
from .support.session_runs import (
    agent_session,
    blob_cache,
    pending_approvals,
    session_harness,
    start,
)

ASKED_BY_USER = "Refund A7 please, the parcel never came"
REASON = "The customer never got A7: refunding it."


@pytest.fixture(scope="module")
async def harness(database_url: str) -> AsyncIterator[Harness]:
    async with session_harness(database_url) as opened:
        yield opened


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[BlobCache]:
    with blob_cache(tmp_path) as opened:
        yield opened


async def refund(args: dict[str, Any], context: CallContext) -> str:
    return "refunded"


async def test_a_tool_call_flows_input_carries_what_led_to_the_call(
    store: ApprovalStore, ledger: ToolLedger, cache: BlobCache
) -> None:
    tool = DexTool(ToolSpec("refund", approval=ApprovalPolicy()), refund)
    runtime = SignoffDex.of(store, ledger, tool)
    worker = SdkWorker(ToolCallFlow(runtime), cache)
    flow_id = f"flow-{uuid.uuid4().hex[:10]}"
    request = ToolCallRequest(
        "c1", "refund", {"amount": 7}, reason=REASON, last_user_message=ASKED_BY_USER
    )
    await worker.wait_for("AwaitToolApproval", flow_id, request)
    [approval] = await store.find(run_id=flow_id)
    revealed = await store.get(approval.approval_id, reveal=True)
    assert revealed.context == RequestContext(REASON, ASKED_BY_USER)

    bare_flow = f"flow-{uuid.uuid4().hex[:10]}"
    await worker.wait_for("AwaitToolApproval", bare_flow, ToolCallRequest("c1", "refund", {}))
    [bare] = await store.find(run_id=bare_flow)
    assert (await store.get(bare.approval_id, reveal=True)).context == RequestContext()


async def test_an_agent_session_reads_the_context_and_schema_from_its_checkpoint(
    harness: Harness, cache: BlobCache
) -> None:
    script = [
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
        AIMessage(content="Refunded."),
    ]
    flow, model = agent_session(harness, Kind.BATCHED, script)
    run = start(flow, cache, model, ASKED_BY_USER)
    await run.driver.run()
    [approval_id] = (await pending_approvals(harness.store, run.session_id)).values()
    approval = await harness.store.get(approval_id, reveal=True)
    assert approval.context == RequestContext(REASON, ASKED_BY_USER)
    schema = approval.policy.args_schema
    assert schema is not None and set(schema["properties"]) == {"order_id", "amount"}
    for pending in run.driver.pending:  # Dex holds neither the reason nor the arguments
        assert b"parcel" not in pending.input.SerializeToString()
        assert b"refunding it" not in pending.input.SerializeToString()
