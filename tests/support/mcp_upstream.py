"""A small, real MCP server for the gateway's tests, in a process of its own.

    python -m tests.support.mcp_upstream stdio
    python -m tests.support.mcp_upstream http [--port PORT]

`http` serves Streamable HTTP at http://127.0.0.1:PORT/mcp (PORT 0, the default: any free
port), to clients of both protocol revisions (the 2025-11-25 handshake and 2026-07-28), and
prints `listening on http://127.0.0.1:PORT/mcp` once it accepts connections.

Three tools, with MCP tool annotations: `balance` (read-only), `tag_ticket` (idempotent,
additive) and `refund` (destructive, not idempotent: money moves). Every execution appends one
JSON line `{"tool", "args", "pid", "ppid"}` to the file `$SIGNOFF_UPSTREAM_LOG` (nothing is recorded
when it is unset), flushed and fsynced before the tool answers, so a test sees it even after
another process was killed. When `$SIGNOFF_UPSTREAM_HOLD` names a path, `refund` waits, after
recording its execution, until that path exists: a test can kill the caller while it is in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import uvicorn
from mcp.client.stdio import StdioServerParameters
from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

from .until import until

__all__ = ["HOLD_ENV", "LOG_ENV", "MODULE", "build_server", "executions", "stdio_parameters"]

MODULE = "tests.support.mcp_upstream"
LOG_ENV = "SIGNOFF_UPSTREAM_LOG"
HOLD_ENV = "SIGNOFF_UPSTREAM_HOLD"
_ROOT = Path(__file__).resolve().parents[2]
_HOLD_LIMIT = 600.0  # seconds a refund waits for its hold file: pytest's limit for a test


def _record(tool: str, args: Mapping[str, Any]) -> None:
    """Append one execution to the log, on disk before the tool answers."""
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    # `ppid`: the process that started this one over stdio (a gateway a test may kill).
    entry = {"tool": tool, "args": dict(args), "pid": os.getpid(), "ppid": os.getppid()}
    line = json.dumps(entry) + "\n"
    # One write of one line in append mode: lines of concurrent processes never interleave.
    with open(path, "a", encoding="utf-8") as log:
        log.write(line)
        log.flush()
        os.fsync(log.fileno())


async def _wait_for_hold() -> None:
    hold = os.environ.get(HOLD_ENV)
    if hold:
        await until(Path(hold).exists, seconds=_HOLD_LIMIT, what=f"the hold file {hold}")


async def balance(account: str) -> str:
    """The balance of an account."""
    _record("balance", {"account": account})
    cents = zlib.crc32(account.encode()) % 100_000  # the same in every process, unlike hash()
    return f"account {account}: {cents / 100:.2f} EUR"


async def tag_ticket(ticket: str, tag: str) -> str:
    """Put a tag on a support ticket (tagging twice changes nothing)."""
    _record("tag_ticket", {"ticket": ticket, "tag": tag})
    return f"ticket {ticket} tagged {tag}"


async def refund(order_id: str, amount: float, note: str = "") -> str:
    """Refund an amount on an order: money leaves the company."""
    _record("refund", {"order_id": order_id, "amount": amount, "note": note})
    await _wait_for_hold()
    return f"refunded {amount:.2f} EUR on {order_id}"


def build_server() -> MCPServer:
    """The upstream server. Built on demand, never at import: constructing an `MCPServer`
    configures the root logger (`logging.basicConfig`), which a test process must not get."""
    server: MCPServer = MCPServer("signoff-test-upstream", version="1.0.0", log_level="WARNING")
    # Plain text results (no outputSchema / structuredContent), as many real servers answer.
    server.add_tool(
        balance,
        annotations=ToolAnnotations(read_only_hint=True),
        structured_output=False,
    )
    server.add_tool(
        tag_ticket,
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=True
        ),
        structured_output=False,
    )
    server.add_tool(
        refund,
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=False
        ),
        structured_output=False,
    )
    return server


class _AnnouncingServer(uvicorn.Server):
    """uvicorn, printing the endpoint once its socket accepts connections."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:  # False when it could not bind; it exits then
            port = self.servers[0].sockets[0].getsockname()[1]
            print(f"listening on http://127.0.0.1:{port}/mcp", flush=True)


async def _serve_http(server: MCPServer, port: int) -> None:
    # The session manager routes a request carrying a 2026-07-28 MCP-Protocol-Version header
    # to the per-request path and anything else to the handshake-era sessions.
    app = server.streamable_http_app(host="127.0.0.1")
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,  # stderr is a pipe nobody may read: keep it quiet
        timeout_graceful_shutdown=2,
    )
    await _AnnouncingServer(config).serve()


def stdio_parameters(env: Mapping[str, str] | None = None) -> StdioServerParameters:
    """How `mcp.Client` starts this server over stdio. The SDK gives the child only a few
    variables of this process's environment (PATH, HOME...): `env` (e.g. the log path) is
    passed explicitly."""
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", MODULE, "stdio"],
        env={"PYTHONPATH": str(_ROOT), **(env or {})},
        cwd=_ROOT,
    )


def executions(log: Path) -> list[dict[str, Any]]:
    """The executions recorded in `log` so far, oldest first (none when it does not exist)."""
    try:
        text = log.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines()]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__)
    transports = parser.add_subparsers(dest="transport", required=True)
    transports.add_parser("stdio", help="serve one client on stdin/stdout")
    http = transports.add_parser("http", help="serve Streamable HTTP on 127.0.0.1")
    http.add_argument("--port", type=int, default=0, help="0 (the default): any free port")
    options = parser.parse_args(argv)
    server = build_server()
    if options.transport == "stdio":
        asyncio.run(server.run_stdio_async())
    else:
        asyncio.run(_serve_http(server, options.port))


if __name__ == "__main__":
    main()
