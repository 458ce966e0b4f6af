"""The database's state as gauges on `/metrics`: pending approvals, calls waiting for a person's
resolution, recent calls by tool and status, the service's own deliveries (webhook, Slack,
e-mail) and each sealing key's nonce budget.

They are read when `/metrics` is scraped, at most once every `SAMPLE_SECONDS` (a scrape in
between, of this replica or from another scraper, gets the last sample), in one read-only
transaction whose statements may take 2 s each. A sample that fails leaves every gauge at its
last value, counts in `signoff_gauge_sample_failures_total` and logs a warning once per outage;
the scrape itself still answers.

Each statement reads an index, never a table that only grows:

- pending approvals: `approvals_pending_idx` (the pending rows only);
- `outcome_unknown` calls: `tool_calls_unknown_idx` (revision 0007; those calls only);
- calls by tool and status: a `GROUP BY` of all of `tool_calls` reads every call ever made (no
  index holds tool or status), seconds at millions of rows, on every scrape; so it counts the
  calls started in the last `CALLS_WINDOW_SECONDS` (`tool_calls_started_idx`), by their status
  now: a rate over a quarter of an hour, and how those calls ended;
- deliveries: `signoff_delivery_state` (the service's login never reads the table), which
  reads the due deliveries and those that failed at least once through two partial indexes;
- nonce budgets: `data_keys`, a few rows.

Tool names are whatever workers registered or asked with: each gauge keeps the `MAX_TOOLS`
busiest under their names and sums the rest under `OTHER_TOOL`, so a worker cannot make the
service's series without bound. Key ids are not secret (every ciphertext names its key); no key
material is read.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import asyncpg
from prometheus_client import CollectorRegistry, Counter, Gauge

from ledger.keys.budget import BUDGET
from ledger.log import get_logger
from ledger.store import Database

from . import _sql as sql
from .deliveries import Deliveries

__all__ = [
    "CALLS_WINDOW_SECONDS",
    "MAX_TOOLS",
    "OTHER_TOOL",
    "SAMPLE_SECONDS",
    "DatabaseGauges",
    "DeliveryState",
    "StateReading",
    "StateSampler",
    "ToolPending",
    "tool_labels",
]

log = get_logger(__name__)

SAMPLE_SECONDS = 5.0
"""The most often the service reads the database's state for its gauges."""
CALLS_WINDOW_SECONDS = 900.0
"""`signoff_tool_calls_recent` counts the calls started this long ago or since."""
MAX_TOOLS = 50
"""Tools a gauge (or the approval wait histogram) names; the rest are `OTHER_TOOL`."""
OTHER_TOOL = "_other"


@dataclass(frozen=True, slots=True)
class ToolPending:
    tool: str
    pending: int
    oldest_seconds: float


@dataclass(frozen=True, slots=True)
class DeliveryState:
    channel: str
    pending: int
    oldest_pending_seconds: float
    given_up: int
    failed_attempts: int


@dataclass(frozen=True, slots=True)
class StateReading:
    """One sample of the database's state."""

    pending: tuple[ToolPending, ...]
    outcome_unknown: int
    outcome_unknown_oldest_seconds: float
    lapsed: int
    recent_calls: tuple[tuple[str, str, int], ...] | None  # tool, status, calls (None: not read)
    deliveries: tuple[DeliveryState, ...]
    nonces_left: tuple[tuple[str, str, int], ...]  # key id, purpose, messages left


def tool_labels(weights: Mapping[str, int], most: int = MAX_TOOLS) -> dict[str, str]:
    """Each tool's label: the `most` heaviest keep their names (ties by name, so that a sample
    names the same tools as the one before), the rest are `OTHER_TOOL`."""
    ranked = sorted(weights, key=lambda tool: (-weights[tool], tool))
    return {tool: tool if i < most else OTHER_TOOL for i, tool in enumerate(ranked)}


class DatabaseGauges:
    """The gauges in one service's registry (`metrics.Metrics` makes them once)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        def gauge(name: str, text: str, labels: Sequence[str] = ()) -> Gauge:
            return Gauge(name, text, labels, registry=registry)

        self.approvals_pending = gauge(
            "signoff_approvals_pending", "Approvals waiting for a decision"
        )
        self.approvals_pending_oldest = gauge(
            "signoff_approvals_pending_oldest_seconds",
            "Age of the oldest approval waiting for a decision (0: none waits)",
        )
        self.pending_by_tool = gauge(
            "signoff_approvals_pending_by_tool",
            "Approvals waiting for a decision, by tool",
            ["tool"],
        )
        self.pending_oldest_by_tool = gauge(
            "signoff_approvals_pending_by_tool_oldest_seconds",
            "Age of the oldest approval waiting for a decision, by tool",
            ["tool"],
        )
        self.outcome_unknown = gauge(
            "signoff_calls_outcome_unknown",
            "Tool calls whose outcome is unknown, waiting for a person's resolution",
        )
        self.outcome_unknown_oldest = gauge(
            "signoff_calls_outcome_unknown_oldest_seconds",
            "How long the oldest call waiting for a resolution has been outcome_unknown (0: none)",
        )
        self.lapsed = gauge(
            "signoff_calls_lapsed",
            "Running tool calls whose worker stopped renewing their lease (a write among them "
            "becomes outcome_unknown when reaped)",
        )
        self.recent_calls = gauge(
            "signoff_tool_calls_recent",
            f"Tool calls started in the last {CALLS_WINDOW_SECONDS:.0f} s, by tool and status now",
            ["tool", "status"],
        )
        self.deliveries_pending = gauge(
            "signoff_deliveries_pending",
            "Deliveries of this service's notifiers not delivered yet and still to be attempted",
            ["channel"],
        )
        self.deliveries_pending_oldest = gauge(
            "signoff_deliveries_pending_oldest_seconds",
            "Age of the oldest delivery still to be attempted (0: none)",
            ["channel"],
        )
        self.deliveries_given_up = gauge(
            "signoff_deliveries_given_up",
            "Deliveries never delivered, with no attempt left",
            ["channel"],
        )
        self.delivery_failed_attempts = gauge(
            "signoff_delivery_failed_attempts",
            "Attempts that did not deliver, ever (only grows: read it with delta or increase)",
            ["channel"],
        )
        self.nonces_left = gauge(
            "signoff_key_nonces_left",
            f"Messages an active sealing key may still seal, of its budget of {BUDGET}",
            ["key_id", "purpose"],
        )
        self.failures = Counter(
            "signoff_gauge_sample_failures",
            "Samples of the database's state that failed (the gauges kept their last values)",
            registry=registry,
        )

    def apply(self, reading: StateReading) -> None:
        """Set every gauge from `reading` (at once: nothing awaits in between, so a scrape
        never sees half of it)."""
        pending = reading.pending
        self.approvals_pending.set(sum(p.pending for p in pending))
        self.approvals_pending_oldest.set(max((p.oldest_seconds for p in pending), default=0.0))
        named = tool_labels({p.tool: p.pending for p in pending})
        counts: dict[str, int] = defaultdict(int)
        oldest: dict[str, float] = defaultdict(float)
        for p in pending:
            counts[named[p.tool]] += p.pending
            oldest[named[p.tool]] = max(oldest[named[p.tool]], p.oldest_seconds)
        _set(self.pending_by_tool, {(t,): float(n) for t, n in counts.items()})
        _set(self.pending_oldest_by_tool, {(t,): s for t, s in oldest.items()})
        self.outcome_unknown.set(reading.outcome_unknown)
        self.outcome_unknown_oldest.set(reading.outcome_unknown_oldest_seconds)
        self.lapsed.set(reading.lapsed)
        if reading.recent_calls is not None:
            self._recent(reading.recent_calls)
        _set(self.deliveries_pending, {(d.channel,): d.pending for d in reading.deliveries})
        _set(
            self.deliveries_pending_oldest,
            {(d.channel,): d.oldest_pending_seconds for d in reading.deliveries},
        )
        _set(self.deliveries_given_up, {(d.channel,): d.given_up for d in reading.deliveries})
        _set(
            self.delivery_failed_attempts,
            {(d.channel,): d.failed_attempts for d in reading.deliveries},
        )
        _set(self.nonces_left, {(k, p): left for k, p, left in reading.nonces_left})

    def _recent(self, recent: tuple[tuple[str, str, int], ...]) -> None:
        per_tool: dict[str, int] = defaultdict(int)
        for tool, _, n in recent:
            per_tool[tool] += n
        named = tool_labels(per_tool)
        calls: dict[tuple[str, ...], float] = defaultdict(float)
        for tool, status, n in recent:
            calls[(named[tool], status)] += n
        _set(self.recent_calls, calls)


def _set(gauge: Gauge, values: Mapping[tuple[str, ...], float]) -> None:
    """A labelled gauge with exactly these series: a tool no longer pending, a key rotated out,
    a notifier no longer configured leaves no series behind."""
    gauge.clear()
    for labels, value in values.items():
        gauge.labels(*labels).set(value)


class StateSampler:
    """Reads the database's state for one service's gauges, at most every `min_interval`."""

    def __init__(
        self,
        db: Database,
        gauges: DatabaseGauges,
        deliveries: Sequence[Deliveries] = (),
        *,
        min_interval: float = SAMPLE_SECONDS,
        calls_window: float = CALLS_WINDOW_SECONDS,
    ) -> None:
        self.db = db
        self.gauges = gauges
        self.min_interval = min_interval
        self.calls_window = calls_window
        self._channels: dict[str, str] = {d.target: d.channel for d in deliveries}
        self._lock = asyncio.Lock()
        self._at: float | None = None
        self._failing = False

    async def sample(self) -> StateReading | None:
        """Read the state and set the gauges, unless a sample was taken less than
        `min_interval` ago (or is under way: this waits for it); the reading, or None when
        none was made now or it failed (the gauges keep their last values)."""
        async with self._lock:
            now = time.monotonic()
            if self._at is not None and now - self._at < self.min_interval:
                return None
            self._at = now  # a failing database is asked no more often than a working one
            try:
                reading = await self.read()
            except Exception as e:  # the database away, a statement too slow: keep the values
                self.gauges.failures.inc()
                if not self._failing:
                    log.warning("database gauges not sampled", error_type=type(e).__name__)
                self._failing = True
                return None
            self._failing = False
            self.gauges.apply(reading)
            return reading

    async def read(self) -> StateReading:
        """The state now, in one snapshot."""
        async with (
            self.db.connection() as conn,
            conn.transaction(isolation="repeatable_read", readonly=True),
        ):
            await conn.execute(sql.SAMPLE_TIMEOUT)
            pending = await conn.fetch(sql.PENDING_BY_TOOL)
            unknown = await conn.fetchrow(sql.OUTCOME_UNKNOWN)
            lapsed = await conn.fetchval(sql.LAPSED_CALLS)
            targets = list(self._channels)
            deliveries = await conn.fetch(sql.DELIVERY_STATE, targets) if targets else []
            keys = await conn.fetch(sql.SEALING_KEYS)
            # Last, in a savepoint of its own: the one read that grows with throughput may
            # time out without taking the others' values with it.
            calls: list[asyncpg.Record] | None = None
            with contextlib.suppress(asyncpg.QueryCanceledError):
                async with conn.transaction():
                    calls = await conn.fetch(sql.RECENT_CALLS, self.calls_window)
        states = [
            DeliveryState(
                self._channels[r["target"]],
                r["pending"],
                r["oldest_pending_seconds"],
                r["given_up"],
                r["failed_attempts"],
            )
            for r in deliveries
        ]
        return StateReading(
            pending=tuple(ToolPending(r["tool"], r["pending"], r["oldest"]) for r in pending),
            outcome_unknown=unknown["waiting"],
            outcome_unknown_oldest_seconds=unknown["oldest"],
            lapsed=lapsed,
            recent_calls=(
                None
                if calls is None
                else tuple((r["tool"], r["status"], r["calls"]) for r in calls)
            ),
            deliveries=_by_channel(states),
            nonces_left=tuple(
                (r["key_id"], r["purpose"], max(0, BUDGET - r["sealed"])) for r in keys
            ),
        )


def _by_channel(states: Sequence[DeliveryState]) -> tuple[DeliveryState, ...]:
    """One state per channel (two targets of one channel summed)."""
    merged: dict[str, DeliveryState] = {}
    for s in states:
        m = merged.get(s.channel)
        merged[s.channel] = (
            s
            if m is None
            else DeliveryState(
                s.channel,
                m.pending + s.pending,
                max(m.oldest_pending_seconds, s.oldest_pending_seconds),
                m.given_up + s.given_up,
                m.failed_attempts + s.failed_attempts,
            )
        )
    return tuple(merged[channel] for channel in sorted(merged))


def _call_counts(rows: list[asyncpg.Record]) -> list[tuple[str, str, int]]:
    return [(r["tool"], r["status"], r["calls"]) for r in rows]
