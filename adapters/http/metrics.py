"""The service's Prometheus metrics, one registry per `Service` (never the process's default
one: several services may run in one process), and the middleware that counts requests.

Requests are labelled by the route's template (`/v1/approvals/{approval_id}`), never the raw
path: a path may carry anything and every id would be a series of its own. A request's
duration runs until its status is sent: for an event stream, the time to open it, not how
long it stays open.

Beside what this process counts, the registry holds the gauges of the database's state
(`gauges.DatabaseGauges`, read on a scrape), the wait of each approval a decision here made
final, and the sizes of this process's group commits (`ledger.store.group_sizes`, listened to
while the service is served).
"""

from __future__ import annotations

import time
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from approvals import Approval, DecisionKind
from approvals.tracing import tier_label

from .gauges import MAX_TOOLS, OTHER_TOOL, DatabaseGauges

__all__ = ["CONTENT_TYPE", "UNROUTED", "Metrics", "RequestMetrics", "Sampler"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The Prometheus text format, as `generate_latest` writes it (every prometheus-client)."""

UNROUTED = "unrouted"
"""The route label of a request answered before any route: none matches (404), or a
middleware refused it first (413 for a `Content-Length` over the limit)."""

_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# From a few milliseconds (a wake on a notification) to the feed's polls and beyond.
_DELAY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
# A person answers within seconds at best; a request may wait a day (its default expiry).
_WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 28800, 86400, 172800)
# Group commit sends at most 4 steps a group (`ledger.store.group.MOST_STEPS`); 8 shows more.
_STEP_BUCKETS = (1, 2, 3, 4, 8)


class Sampler(Protocol):
    async def sample(self) -> object: ...


class Metrics:
    """What one service measures, in its own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "signoff_http_requests",
            "HTTP requests answered, by method, route template and status",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.request_seconds = Histogram(
            "signoff_http_request_duration_seconds",
            "Time until a request's status is sent (an event stream: until it opens)",
            ["method", "route"],
            registry=self.registry,
        )
        self.decisions = Counter(
            "signoff_decisions",
            "Decisions recorded through this service (a vote of a quorum is one), by kind",
            ["decision"],
            registry=self.registry,
        )
        for kind in DecisionKind:
            self.decisions.labels(decision=str(kind))
        self.feed_delay = Histogram(
            "signoff_feed_delay_seconds",
            "From an approval event's journal time (recorded_at, the database's clock) to its "
            "first delivery by this process's approval feed to an event stream",
            buckets=_DELAY_BUCKETS,
            registry=self.registry,
        )
        self.auth_failures = Counter(
            "signoff_auth_failures",
            "Bearer credentials refused (unknown, wrong, expired, revoked, invalid)",
            registry=self.registry,
        )
        self.rate_limited = Counter(
            "signoff_rate_limited",
            "Requests refused with 429: their address had too many refused credentials",
            registry=self.registry,
        )
        self.horizon_lag = Gauge(
            "signoff_journal_horizon_lag_seconds",
            "How long the oldest transaction still running has held back the journal's global "
            "order (0: none holds it)",
            registry=self.registry,
        )
        self.events_behind_horizon = Gauge(
            "signoff_journal_events_behind_horizon",
            "Events at or above the horizon: written or being written, not yet in the global order",
            registry=self.registry,
        )
        self.horizon: Sampler | None = None
        """What refreshes the horizon gauges on a scrape (set where the service is served)."""
        self.approval_wait = Histogram(
            "signoff_approval_wait_seconds",
            "From an approval's request to the decision through this service that made it "
            "final, by tier (self_confirm, four_eyes, quorum) and tool",
            ["tier", "tool"],
            buckets=_WAIT_BUCKETS,
            registry=self.registry,
        )
        self._wait_tools: set[str] = set()
        self.group_commit_steps = Histogram(
            "signoff_group_commit_steps",
            "Steps in each group this process's group commit sent (1: a step sent alone)",
            buckets=_STEP_BUCKETS,
            registry=self.registry,
        )
        self.database = DatabaseGauges(self.registry)
        self.database_sampler: Sampler | None = None
        """What refreshes `database` on a scrape (set where the service is served)."""
        self.standby: Sampler | None = None
        """What measures the standby's lag on a scrape, in a service that reads from one
        (`standby.StandbyWatch`, which adds its gauges to this registry)."""

    def approval_final(self, approval: Approval) -> None:
        """Observe how long `approval` waited, now that a decision made it final."""
        if approval.decided_at is None or not approval.status.final:
            return
        tool = approval.tool
        if tool not in self._wait_tools:
            if len(self._wait_tools) >= MAX_TOOLS:
                tool = OTHER_TOOL
            else:
                self._wait_tools.add(tool)
        waited = (approval.decided_at - approval.requested_at).total_seconds()
        self.approval_wait.labels(tier_label(approval.policy), tool).observe(max(waited, 0.0))

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format."""
        return generate_latest(self.registry)


def method_label(method: str) -> str:
    """The method, or `other` for one outside HTTP's usual few (clients choose it freely)."""
    return method if method in _METHODS else "other"


def route_label(scope: Scope) -> str:
    """The template of the route that answered `scope` (set in it by the framework's routing),
    else `UNROUTED`."""
    path = getattr(scope.get("route"), "path", None)
    return path if isinstance(path, str) and path else UNROUTED


class RequestMetrics:
    """Counts each HTTP request and times it, by route template; outermost, so that requests
    a middleware refuses (413) are counted too."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        method = method_label(scope["method"])
        status = 500

        async def sent(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                self.metrics.request_seconds.labels(method, route_label(scope)).observe(
                    time.perf_counter() - started
                )
            await send(message)

        try:
            await self.app(scope, receive, sent)
        finally:
            self.metrics.requests.labels(method, route_label(scope), str(status)).inc()
