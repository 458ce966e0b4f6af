"""The test MCP upstream (`support.mcp_upstream`), in a process of its own, answers the real MCP
client over stdio and Streamable HTTP, at both protocol revisions: it lists its three tools with
their annotations, runs each one and records every execution once; its hold file keeps a refund
in flight until the test lets it go."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp_types import CallToolResult, TextContent

from .support.mcp_upstream import HOLD_ENV, LOG_ENV, executions, stdio_parameters
from .support.processes import start_mcp_upstream
from .support.until import until

TRANSPORTS = ("stdio", "http")
# `mode` of mcp.Client: the initialize handshake (2025-11-25) or the per-request envelope.
REVISIONS = {"legacy": "2025-11-25", "2026-07-28": "2026-07-28"}

ANNOTATIONS = {
    "balance": {"read_only_hint": True},
    "tag_ticket": {"read_only_hint": False, "destructive_hint": False, "idempotent_hint": True},
    "refund": {"read_only_hint": False, "destructive_hint": True, "idempotent_hint": False},
}

CALLS: list[tuple[str, dict[str, Any], str]] = [  # tool, arguments, its answer
    ("balance", {"account": "A1"}, "account A1: 736.97 EUR"),
    ("tag_ticket", {"ticket": "T-7", "tag": "vip"}, "ticket T-7 tagged vip"),
    ("refund", {"order_id": "A-1", "amount": 12.5, "note": "late"}, "refunded 12.50 EUR on A-1"),
]


@asynccontextmanager
async def upstream(
    transport: str, mode: str, env: dict[str, str]
) -> AsyncIterator[tuple[Client, int | None]]:
    """A client connected to a new upstream process; the upstream's pid when the test knows it
    (the SDK's stdio client starts its child itself and does not say)."""
    if transport == "stdio":
        async with Client(stdio_parameters(env), mode=mode, read_timeout_seconds=60) as client:
            yield client, None
        return
    url, process = await start_mcp_upstream(env)
    try:
        async with Client(url, mode=mode, read_timeout_seconds=60) as client:
            yield client, process.pid
    finally:
        process.kill()
        await process.wait()


def text_of(result: CallToolResult) -> str:
    assert not result.is_error, result
    [content] = result.content
    assert isinstance(content, TextContent)
    return content.text


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "upstream.jsonl"


@pytest.mark.parametrize("mode", REVISIONS)
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_the_upstream_lists_its_three_tools_with_their_annotations(
    transport: str, mode: str, log: Path
) -> None:
    async with upstream(transport, mode, {LOG_ENV: str(log)}) as (client, _):
        assert client.protocol_version == REVISIONS[mode]
        listing = await client.list_tools()
    tools = {tool.name: tool for tool in listing.tools}
    assert set(tools) == set(ANNOTATIONS)
    for name, hints in ANNOTATIONS.items():
        annotations = tools[name].annotations
        assert annotations is not None, name
        shown = annotations.model_dump(exclude_none=True)
        assert shown == hints, name
    assert tools["refund"].input_schema["required"] == ["order_id", "amount"]
    assert executions(log) == []  # listing runs nothing


@pytest.mark.parametrize("mode", REVISIONS)
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_each_tool_answers_and_records_its_execution_once(
    transport: str, mode: str, log: Path
) -> None:
    async with upstream(transport, mode, {LOG_ENV: str(log)}) as (client, pid):
        for done, (tool, arguments, answer) in enumerate(CALLS):
            assert text_of(await client.call_tool(tool, arguments)) == answer
            lines = executions(log)
            assert len(lines) == done + 1, lines
            assert {k: v for k, v in lines[-1].items() if k not in ("pid", "ppid")} == {
                "tool": tool,
                "args": arguments,
            }
    pids = {line["pid"] for line in executions(log)}
    assert len(pids) == 1 and os.getpid() not in pids  # run by the upstream, not in here
    if pid is not None:
        assert pids == {pid}


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_refund_waits_for_the_hold_file_after_recording_itself(
    transport: str, tmp_path: Path, log: Path
) -> None:
    hold = tmp_path / "release"
    env = {LOG_ENV: str(log), HOLD_ENV: str(hold)}
    async with upstream(transport, "legacy", env) as (client, _):
        call = asyncio.create_task(client.call_tool("refund", {"order_id": "H-1", "amount": 3}))
        await until(lambda: len(executions(log)) == 1, what="the refund recorded")
        assert executions(log)[0]["tool"] == "refund"
        assert not call.done(), "the refund answered before its hold was released"
        hold.touch()
        assert text_of(await asyncio.wait_for(call, 30)) == "refunded 3.00 EUR on H-1"
    assert len(executions(log)) == 1
