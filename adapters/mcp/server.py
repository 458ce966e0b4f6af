"""The gateway as an MCP server (the SDK's lowlevel `Server`): `tools/list` is the upstreams'
tools under their exposed names, `tools/call` is `Gateway.call_tool`. Served over stdio (a local
client's config file) or Streamable HTTP (shared use, bearer tokens checked by `verifier`).

The middleware, outermost first: the request's server span (`tracing.ServerSpans`, in place of
the SDK's, whose spans carry error messages), `RingReady` (the key ring fresh
before a requestState is opened), the SDK's `RequestStateBoundary` under `RingCodec`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import mcp_types as types
from mcp.server.auth.provider import TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.server.stdio import stdio_server
from mcp.server.transport_security import TransportSecuritySettings

from ledger.keys import KeyRing

from .calls import Gateway
from .request_state import RingCodec, ready_to_seal
from .tasks import serve_tasks
from .tracing import without_sdk_spans

__all__ = ["STATE_SECONDS", "build_server", "serve_http", "serve_stdio"]

SERVER_NAME = "signoff-mcp"
STATE_SECONDS = 3600.0
"""How long a requestState opens: past it the client calls again and is asked again for the
same approval (its run, call and arguments find it)."""


class RingReady:
    """Readies the key ring before a `tools/call` (`ready_to_seal`: the key a requestState
    names loaded): the SDK opens and seals requestState synchronously around it."""

    def __init__(self, ring: KeyRing) -> None:
        self.ring = ring

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if ctx.method == "tools/call":
            state = (ctx.params or {}).get("requestState")
            await ready_to_seal(self.ring, state if isinstance(state, str) else None)
        return await call_next(ctx)


def build_server(gateway: Gateway) -> Server[Any]:
    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=gateway.upstreams.tools())

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        # A task is a dict the SDK passes through as the extension's shape.
        return await gateway.call_tool(ctx, params)  # type: ignore[return-value]

    server: Server[Any] = Server(
        SERVER_NAME,
        instructions="Tools behind Signoff: a call may wait for an approval, and a finished "
        "call of a run replays its result instead of running again.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
    security = RequestStateSecurity(
        codec=RingCodec(gateway.ring), ttl=STATE_SECONDS, bind_principal=gateway.principal_of
    )
    serve_tasks(gateway, server)
    server.middleware = without_sdk_spans(server.middleware)
    server.middleware.append(RingReady(gateway.ring))
    server.middleware.append(RequestStateBoundary(security, default_audience=SERVER_NAME))
    return server


async def serve_stdio(server: Server[Any]) -> None:
    """Serve one client over this process's stdin and stdout until it closes them."""
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


async def serve_http(
    server: Server[Any],
    *,
    host: str,
    port: int,
    verifier: TokenVerifier,
    issuer_url: str,
    on_started: Callable[[str], None] | None = None,
) -> None:
    """Serve Streamable HTTP at `http://host:port/mcp` until stopped (SIGINT, SIGTERM); every
    request needs a bearer token `verifier` accepts (401 otherwise).

    Raises:
        ServiceMisconfigured: it cannot listen on `host:port`.
    """
    import uvicorn  # the ASGI server: only when serving HTTP

    from adapters.http.server import bound_port, ended, until_started

    security = None
    if host in ("127.0.0.1", "localhost", "::1"):  # DNS rebinding: loopback names only
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
        )
    app = server.streamable_http_app(
        host=host,
        token_verifier=verifier,
        auth=AuthSettings(issuer_url=issuer_url, resource_server_url=None),  # type: ignore[arg-type]
        transport_security=security,
    )
    # log_config None: the command configures logging; uvicorn must not.
    web = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_config=None))
    task = asyncio.create_task(web.serve())
    await until_started(web, task, host, port)
    if on_started is not None:
        shown = f"[{host}]" if ":" in host else host
        on_started(f"http://{shown}:{bound_port(web)}/mcp")
    await ended(task, host, port)
