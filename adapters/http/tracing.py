"""A server span for each HTTP request to `signoff serve` (`ledger.telemetry`), a child of the
caller's span when the request carries W3C trace context (`traceparent`, `tracestate`), so a
reviewer's decision or an auditor's export shows in the trace of whoever sent it.

Named `{method} {route}` by the route's template, never the raw path (as `metrics` labels
requests); no header, query or body is recorded.
"""

from __future__ import annotations

from opentelemetry import propagate
from opentelemetry.trace import SpanKind
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ledger.telemetry import failed, span

from .metrics import method_label, route_label

__all__ = ["ServerSpans"]

_CARRIED = frozenset({b"traceparent", b"tracestate"})


class ServerSpans:
    """Outermost: the span covers what every other middleware does, a 413 too."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        carrier = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in scope.get("headers", ())
            if name in _CARRIED
        }
        method = method_label(scope["method"])
        status = 500
        with span(method, kind=SpanKind.SERVER, context=propagate.extract(carrier)) as current:

            async def sent(message: Message) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = message["status"]
                await send(message)

            try:
                await self.app(scope, receive, sent)
            finally:
                if current.is_recording():
                    route = route_label(scope)
                    current.update_name(f"{method} {route}")
                    current.set_attributes(
                        {
                            "http.request.method": method,
                            "http.route": route,
                            "http.response.status_code": status,
                            "url.scheme": str(scope.get("scheme", "http")),
                        }
                    )
                    if status >= 500:
                        failed(current, str(status))
