"""The gateway's server span for each MCP request (`ledger.telemetry`), continuing the client's
trace from `params._meta.traceparent`, in place of the SDK's own middleware: that one records an
error's message as the span's status and an exception's message and traceback as an event, and
a refused call's message quotes the reviewer's reason or the policy's, which Signoff keeps
sealed. Here a failure is its code only: `error.type` and `rpc.response.status_code`.

Attributes as the SDK sets them (MCP and GenAI conventions): `mcp.method.name`,
`mcp.protocol.version`, `jsonrpc.request.id`, and for `tools/call` `gen_ai.operation.name` and
`gen_ai.tool.name`. The gateway's `execute_tool` span of the same call is its child.
"""

from __future__ import annotations

from typing import Any

from mcp.server._otel import OpenTelemetryMiddleware
from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, CallToolResult
from opentelemetry import propagate
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind
from pydantic import ValidationError

from ledger.telemetry import Attr, failed, tracer

__all__ = ["ServerSpans", "without_sdk_spans"]


class ServerSpans(ServerMiddleware[Any]):
    """Outermost: every inbound request is a SERVER span."""

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        name = ctx.params.get("name") if ctx.params else None
        target = name if isinstance(name, str) else None
        attributes: dict[str, str] = {"mcp.method.name": ctx.method}
        if ctx.protocol_version is not None:
            attributes["mcp.protocol.version"] = str(ctx.protocol_version)
        if ctx.request_id is not None:
            attributes["jsonrpc.request.id"] = str(ctx.request_id)
        if ctx.method == "tools/call":
            attributes[Attr.OPERATION] = "execute_tool"
            if target is not None:
                attributes[Attr.TOOL_NAME] = target
        title = f"{ctx.method} {target}" if target else ctx.method
        with tracer.start_as_current_span(
            title,
            _carried(ctx.meta),
            SpanKind.SERVER,
            attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as current:
            try:
                result = await call_next(ctx)
            except MCPError as e:
                code = str(e.error.code)
                failed(current, code)
                current.set_attribute("rpc.response.status_code", code)
                raise
            except ValidationError:
                failed(current, str(INVALID_PARAMS))
                raise
            except BaseException as e:
                failed(current, type(e).__name__)
                raise
            if ctx.method == "tools/call" and _is_error(result):
                failed(current, "tool_error")
            return result


def without_sdk_spans(middleware: list[ServerMiddleware[Any]]) -> list[ServerMiddleware[Any]]:
    """`middleware` with the SDK's span middleware replaced by `ServerSpans`, outermost."""
    return [ServerSpans(), *(m for m in middleware if not isinstance(m, OpenTelemetryMiddleware))]


def _carried(meta: Any) -> Context | None:
    """The caller's context from `_meta`, or None (the span nests under the current one)."""
    if not isinstance(meta, dict) or not isinstance(meta.get("traceparent"), str):
        return None
    carrier = {k: v for k, v in meta.items() if k in ("traceparent", "tracestate")}
    return propagate.extract(carrier)


def _is_error(result: Any) -> bool:
    if isinstance(result, CallToolResult):
        return bool(result.is_error)
    return isinstance(result, dict) and result.get("isError") is True
