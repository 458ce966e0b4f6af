"""The ASGI application of `signoff serve`: `create_app(service)`.

- `/v1/...`: the versioned API (`approvals_api`, and `events_api` for its live stream;
  `calls_api` for the tool-call ledger and `audit_api` for the journal's digests and export),
  bearer-authenticated (no anonymous access: 401 with a
  `WWW-Authenticate: Bearer` challenge); its OpenAPI document at `/v1/openapi.json`.
- `/healthz` (the process answers) and `/readyz` (the health checks of `ledger.health` pass:
  the database answers, the schema is at head, the keys open, the journal's horizon is not
  held too long), unauthenticated, for load balancers and orchestrators; they reveal the
  checks' names and statuses, never their details.
- `/metrics`: the service's Prometheus metrics (`metrics`), for an auditor's token.
- `/inbox`: the web inbox (`inbox`), a page over this same API, signed in by a cookie.
- Request bodies above the service's limit are refused with 413 before they are read whole.
- Each request is counted and timed by its route's template (`metrics.RequestMetrics`), and is
  a server span of the caller's trace (`traceparent`): FastAPI's own OpenTelemetry
  instrumentation, through the API (nothing records until the application installs an SDK).
  Its log records and its spans of dependencies and endpoints are off: they carry exception
  messages, which may quote a request's values.
- Each request is logged once (method, path, status, time, the caller's reviewer id); never a
  header, a token or a body.
"""

from __future__ import annotations

import time

from fastapi import FastAPI, HTTPException
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ledger import __version__
from ledger.log import get_logger

from . import approvals_api, audit_api, calls_api, events_api, inbox, metrics_api, policy_api
from .errors import install_error_handlers, problem
from .metrics import RequestMetrics
from .service import Service

__all__ = ["BodyLimit", "RequestLog", "create_app"]

log = get_logger(__name__)


class BodyLimit:
    """Refuse request bodies of more than `max_bytes`: at once when Content-Length says so,
    else as soon as the bytes received pass it (chunked bodies)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    too_long = int(value) > self.max_bytes
                except ValueError:
                    too_long = False
                if too_long:
                    await self._refuse(scope, receive, send)
                    return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    # FastAPI's own class: its body reader lets it through as it is.
                    raise HTTPException(413, self._message())
            return message

        await self.app(scope, limited, send)

    def _message(self) -> str:
        return f"the request body is larger than {self.max_bytes} bytes"

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        await problem(413, "too_large", self._message(), {"Connection": "close"})(
            scope, receive, send
        )


class ApiNoStore:
    """`Cache-Control: no-store` on every `/v1` answer that sets no policy of its own, refusals
    too: answers name reviewers and calls, and a reveal carries arguments in clear, so no browser
    or proxy cache may keep them."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if not path.startswith("/v1/"):
            await self.app(scope, receive, send)
            return

        async def no_store(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                if not any(k.lower() == b"cache-control" for k, _ in headers):
                    headers.append((b"cache-control", b"no-store"))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, no_store)


class RequestLog:
    """One log line per request: method, path, status, time and the caller's reviewer id (set
    by authentication in the request's state); never a header, a query or a body."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def sent(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sent)
        finally:
            identity = scope.get("state", {}).get("identity")
            log.info(
                "request",
                method=scope["method"],
                path=scope["path"],
                status=status,
                ms=round((time.perf_counter() - started) * 1000, 1),
                reviewer=None if identity is None else identity.reviewer,
            )


def create_app(service: Service) -> FastAPI:
    """The service's application, on an opened `Service` (the caller closes it)."""
    app = FastAPI(
        title="Signoff",
        version=__version__,
        description="Approvals for AI agents' tool calls: reviewers decide, auditors read.",
        openapi_url="/v1/openapi.json",
        docs_url=None,
        redoc_url=None,
        telemetry={"logs": False, "operation_spans": False},
    )
    app.state.service = service
    install_error_handlers(app)
    app.include_router(events_api.router)  # before /v1/approvals/{approval_id} matches it
    app.include_router(approvals_api.router)
    app.include_router(calls_api.router)
    app.include_router(audit_api.router)
    app.include_router(policy_api.router)
    app.include_router(metrics_api.router)
    app.include_router(inbox.router)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> JSONResponse:
        # Names and statuses only: the details (URLs, key ids, ages) stay in the log.
        health = await service.health()
        checks = {c.name: c.status.value for c in health.checks}
        if health.ok:
            return JSONResponse({"status": "ready", "checks": checks})
        failed = ", ".join(health.failed)
        return problem(503, "unavailable", f"not ready: {failed}", more={"checks": checks})

    app.add_middleware(RequestLog)
    app.add_middleware(BodyLimit, max_bytes=service.max_body_bytes)
    app.add_middleware(RequestMetrics, metrics=service.metrics)
    app.add_middleware(ApiNoStore)
    app.add_middleware(inbox.InboxHeaders)  # the last added is outermost: BodyLimit's 413 too
    return app
