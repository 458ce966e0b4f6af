"""Traces across processes: the MCP gateway (`signoff mcp`, its own process, with an SDK
installed as an operator installs one) continues the client's trace from `_meta.traceparent`,
its `tools/call` span the parent of the ledger's `execute_tool` span; and a worker with no SDK
installed exports nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import mcp_types as types
import pytest
from mcp import Client
from mcp.client.context import ClientRequestContext
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from adapters.mcp.errors import APPROVAL_REFUSED
from approvals import Decision

from .support.mcp_gateway import GatewaySite, approval_of, gateway_site
from .support.processes import ROOT, kek_env
from .support.telemetry import captured
from .support.traced import SPANS_ENV
from .support.until import until

SECRET = "4111-1111-1111-1111"


@pytest.fixture
async def site(server_url: str, tmp_path: Path) -> AsyncIterator[GatewaySite]:
    async with gateway_site(server_url, tmp_path) as made:
        yield made


def spans_in(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def traced_gateway(site: GatewaySite, spans: Path) -> StdioServerParameters:
    """`signoff mcp` over stdio with an SDK installed, writing its spans to `spans`."""
    plain = site.stdio()
    return StdioServerParameters(
        command=plain.command,
        args=["-m", "tests.support.traced", *plain.args[1:]],
        env={**(plain.env or {}), SPANS_ENV: str(spans)},
        cwd=plain.cwd,
    )


async def test_the_gateway_continues_the_clients_trace(site: GatewaySite, tmp_path: Path) -> None:
    spans = tmp_path / "spans.jsonl"
    traced = traced_gateway(site, spans)
    trace_id, parent = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    caller = NonRecordingSpan(
        SpanContext(int(trace_id, 16), int(parent, 16), is_remote=False, trace_flags=TraceFlags(1))
    )
    meta = cast(types.RequestParamsMeta, {"io.signoff/run": f"run-{uuid.uuid4().hex[:8]}"})
    # The client's SDK opens its own span under the caller's and sends it in `_meta`.
    with captured() as client_side, trace.use_span(caller):
        async with Client(traced, mode="2026-07-28") as client:
            read = await client.call_tool("balance", {"account": "A1"}, meta=meta)
            assert "A1" in read.content[0].text  # type: ignore[union-attr]

            def both_ended() -> bool:
                names = {s["name"] for s in spans_in(spans)}
                return {"tools/call balance", "execute_tool balance"} <= names

            await until(both_ended, what="the gateway's spans of the call")
    (sent,) = client_side.named("MCP send tools/call balance")  # the SDK client's span
    assert sent.kind is trace.SpanKind.CLIENT
    assert sent.parent is not None and sent.parent.span_id == int(parent, 16)
    by_name = {s["name"]: s for s in spans_in(spans)}
    server, call = by_name["tools/call balance"], by_name["execute_tool balance"]
    assert server["kind"] == "SERVER" and server["trace_id"] == trace_id
    assert server["parent_span_id"] == f"{sent.context.span_id:016x}"
    assert call["trace_id"] == trace_id and call["parent_span_id"] == server["span_id"]
    assert call["attributes"]["gen_ai.tool.name"] == "balance"
    assert call["attributes"]["signoff.call.status"] == "succeeded"
    assert isinstance(call["attributes"]["signoff.journal.position"], int)
    assert "A1" not in json.dumps([s["attributes"] for s in by_name.values()])


NO_SDK = """
import asyncio, importlib.abc, sys

class NoSdk(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "opentelemetry.sdk" or name.startswith("opentelemetry.sdk."):
            raise ModuleNotFoundError(name)
        return None

sys.meta_path.insert(0, NoSdk())

from opentelemetry import trace
from ledger.calls.model import Effect, ToolCall, ToolPolicy
from ledger.calls.service import ToolLedger
from ledger.keys import KeyRing
from ledger.store import Database

seen = []

async def tool(args, context):
    span = trace.get_current_span()
    seen.append((span.is_recording(), span.get_span_context().is_valid))
    return "ok"

async def main():
    async with await Database.connect(sys.argv[1]) as db:
        ledger = ToolLedger(db, await KeyRing.open(db))
        outcome = await ledger.execute(
            ToolCall(sys.argv[2], "c1", "look", {}), tool, ToolPolicy(Effect.READ)
        )
        await ledger.close()
    loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry.sdk"))
    print(outcome.status, seen, type(trace.get_tracer_provider()).__name__, loaded)

asyncio.run(main())
"""


def test_with_no_sdk_installed_nothing_records(database_url: str) -> None:
    env = {**kek_env(), "PYTHONPATH": str(ROOT)}
    env.pop("OTEL_PYTHON_TRACER_PROVIDER", None)
    done = subprocess.run(
        [sys.executable, "-c", NO_SDK, database_url, f"run-{uuid.uuid4().hex[:8]}"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[0] == "succeeded [(False, False)] ProxyTracerProvider []"


async def test_a_refusal_reaches_the_trace_as_its_code_never_its_reason(
    site: GatewaySite, tmp_path: Path
) -> None:
    spans = tmp_path / "spans.jsonl"
    reason = f"card {SECRET} is flagged"

    async def reviewer(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestURLParams), params
        await site.reviewer.decide(approval_of(params.url), Decision.reject(reason), "cfo")
        return types.ElicitResult(action="accept")

    # Sampled at the client (with an SDK installed in this process, a parent that is not
    # sampled makes the gateway drop its spans too, as OpenTelemetry's default sampler does).
    with captured():
        await refuse(site, spans, reviewer)
    by_name = {s["name"]: s for s in spans_in(spans)}
    server = by_name["tools/call refund"]
    assert server["status"] == "ERROR"
    assert server["attributes"]["error.type"] == str(APPROVAL_REFUSED)
    assert by_name["execute_tool refund"]["attributes"]["signoff.call.status"] == "denied"
    assert SECRET not in spans.read_text(encoding="utf-8")


async def refuse(site: GatewaySite, spans: Path, reviewer: Any) -> None:
    """A refund the reviewer rejects, through the traced gateway, until its span ended."""
    async with Client(
        traced_gateway(site, spans), mode="2026-07-28", elicitation_callback=reviewer
    ) as client:
        with pytest.raises(MCPError) as refused:
            await client.call_tool("refund", {"order_id": "A-1", "amount": 12.5})
        assert SECRET in refused.value.message  # the client is told; the trace is not

        def refused_span() -> bool:
            return any(s["name"] == "tools/call refund" for s in spans_in(spans))

        await until(refused_span, what="the refused call's server span")
