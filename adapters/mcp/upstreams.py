"""The upstream MCP servers the gateway fronts: one `mcp.Client` each for the gateway's life,
and the catalog of their tools under the names clients see, each with the `ToolSpec` Signoff
runs it under (the config file's word, else the upstream's annotations, else the default: a
single-attempt write that needs approval).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any, cast

import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from adapters.runtime import ToolSpec, effect_of_hints
from approvals import ApprovalPolicy, InvalidApprovalRequest
from ledger.calls.model import Effect
from ledger.log import get_logger

from .config import GatewayConfig, GatewayConfigError, ToolConfig, UpstreamConfig

__all__ = ["Route", "Upstreams", "connect_upstreams", "route_of"]

log = get_logger(__name__)

_MAX_PAGES = 1000


@dataclass(frozen=True)
class Route:
    """One tool clients can call: where it lives and how Signoff runs it.

    Attributes:
        tool: the tool as clients see it (its name is the exposed one).
        upstream: the upstream's name; `upstream_tool` its own name for the tool.
    """

    tool: types.Tool
    upstream: str
    upstream_tool: str
    spec: ToolSpec


class Upstreams:
    """The connected upstreams and their tools' routes, by exposed name."""

    def __init__(self, clients: Mapping[str, Client], routes: Mapping[str, Route]) -> None:
        self.clients = dict(clients)
        self.routes = dict(routes)

    def tools(self) -> list[types.Tool]:
        return [route.tool for route in self.routes.values()]

    async def call(
        self, route: Route, args: dict[str, Any], meta: dict[str, Any] | None = None
    ) -> types.CallToolResult:
        """Run the tool on its upstream (no input requests: the upstream gets none answered).

        Raises:
            MCPError: the upstream refused the request (an unknown tool, bad arguments), or
                the call's fate is unknown (the connection lost, a timeout, its internal error).
        """
        client = self.clients[route.upstream]
        return await client.call_tool(
            route.upstream_tool, args, meta=cast("types.RequestParamsMeta | None", meta)
        )


@asynccontextmanager
async def connect_upstreams(config: GatewayConfig) -> AsyncIterator[Upstreams]:
    """Connect to every upstream, list its tools and build the routes; closed on exit.

    Raises:
        GatewayConfigError: an upstream cannot be reached or lists nothing usable, two tools
            get one exposed name, or the config names a tool no upstream has.
    """
    failed: GatewayConfigError | None = None
    async with AsyncExitStack() as stack:
        try:
            upstreams = await _connected(stack, config)
        except GatewayConfigError as e:
            # Raised once the clients are closed: raised inside, a stdio client's task group
            # wraps it in an ExceptionGroup and the command shows no line of its own.
            failed = e
        else:
            yield upstreams
    if failed is not None:
        raise failed


async def _connected(stack: AsyncExitStack, config: GatewayConfig) -> Upstreams:
    clients: dict[str, Client] = {}
    routes: dict[str, Route] = {}
    for upstream in config.upstreams:
        client = _client(upstream, stack)
        try:
            clients[upstream.name] = await stack.enter_async_context(client)
            listed = await _all_tools(upstream.name, clients[upstream.name])
        except GatewayConfigError:
            raise
        except Exception as e:  # any transport failure: one line at start
            raise GatewayConfigError(
                f"upstream {upstream.name!r} cannot be reached: {type(e).__name__}: {e}"
            ) from None
        for tool in listed:
            route = route_of(config, upstream.name, tool)
            if route.tool.name in routes:
                raise GatewayConfigError(
                    f"two upstreams list a tool {route.tool.name!r}: set namespace = true"
                )
            routes[route.tool.name] = route
        log.info("upstream connected", upstream=upstream.name, tools=len(listed))
    unknown = sorted(set(config.tools) - set(routes))
    if unknown:
        raise GatewayConfigError(f"[tools.{unknown[0]}] names a tool no upstream lists")
    return Upstreams(clients, routes)


def _client(upstream: UpstreamConfig, stack: AsyncExitStack) -> Client:
    if upstream.url is not None:
        # The SDK does not close an HTTP client it is given: the stack does, with the gateway.
        http = create_mcp_http_client(headers=dict(upstream.headers) or None)
        stack.push_async_callback(http.aclose)
        return Client(streamable_http_client(upstream.url, http_client=http))
    assert upstream.command is not None
    # Only the SDK's safe variables and the configured ones: never the gateway's KEK or URL.
    params = StdioServerParameters(
        command=upstream.command, args=list(upstream.args), env=dict(upstream.env) or None
    )
    return Client(params)


async def _all_tools(name: str, client: Client) -> list[types.Tool]:
    """Every page of the upstream's tools; a bound on pages, since an upstream that always
    names a next cursor would keep the gateway listing (and growing) forever.

    Raises:
        GatewayConfigError: the listing did not end within `_MAX_PAGES` pages.
    """
    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools
    raise GatewayConfigError(
        f"upstream {name!r} lists tools on more than {_MAX_PAGES} pages: its listing never ends"
    )


def route_of(config: GatewayConfig, upstream: str, tool: types.Tool) -> Route:
    """The route of `tool`: the config's word on it, else its annotations (when trusted).

    Raises:
        GatewayConfigError: the config's hints do not fit the tool's schema.
    """
    name = config.exposed_name(upstream, tool.name)
    said = config.tools.get(name, ToolConfig())
    hints = _annotations(tool) if config.trust_annotations else {}
    effect = said.effect or effect_of_hints(hints)
    approval = _approval(config, said, hints, effect)
    if approval is not None:
        approval = _presented(config, name, approval, tool)
    description = said.description or tool.description or ""
    spec = ToolSpec(name=name, effect=effect, approval=approval, description=description)
    exposed = tool.model_copy(update={"name": name})
    return Route(tool=exposed, upstream=upstream, upstream_tool=tool.name, spec=spec)


def _annotations(tool: types.Tool) -> dict[str, Any]:
    if tool.annotations is None:
        return {}
    return tool.annotations.model_dump(by_alias=True, exclude_none=True)


def _approval(
    config: GatewayConfig, said: ToolConfig, hints: Mapping[str, Any], effect: Effect
) -> ApprovalPolicy | None:
    """The config's policy; else none for a read or an additive write the upstream declares
    (`destructiveHint: false`), else the default policy."""
    if isinstance(said.approval, ApprovalPolicy):
        return said.approval
    if said.approval is False:
        return None
    if effect is Effect.READ or hints.get("destructiveHint") is False:
        return None
    return config.default_approval


def _presented(
    config: GatewayConfig, name: str, policy: ApprovalPolicy, tool: types.Tool
) -> ApprovalPolicy:
    """The policy with the tool's reviewer hints and its argument schema (left out, with a
    log line, when the library would refuse it: reviewers then edit raw JSON)."""
    hints = config.hints.get(name, {})
    try:
        policy = replace(
            policy,
            headline=tuple(hints.get("headline", policy.headline)),
            sensitive=frozenset(hints.get("sensitive", policy.sensitive)),
            irreversible=bool(hints.get("irreversible", policy.irreversible)),
        )
    except (InvalidApprovalRequest, TypeError) as e:
        raise GatewayConfigError(f"[tools.{name}]: {e}") from None
    if not policy.description:  # what reviewers read of the tool
        said = config.tools.get(name, ToolConfig()).description
        policy = replace(policy, description=said or tool.description or "")
    try:
        return replace(policy, args_schema=dict(tool.input_schema))
    except InvalidApprovalRequest as e:
        log.warning("tool schema not shown to reviewers", tool=name, problem=str(e))
        return policy
