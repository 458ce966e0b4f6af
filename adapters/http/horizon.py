"""How far the journal's horizon lags: the global order reaches only below the oldest
transaction still running (`pg_snapshot_xmin`), so one transaction that holds a transaction id
and stays open (any login's, an auditor's too) holds back every event after it from event
streams, webhooks, exports and digests until it ends.

The service samples the horizon every few seconds and on every scrape of `/metrics`: how long
it has stood at a transaction still running (`signoff_journal_horizon_lag_seconds`, measured by
this process, so at worst one interval short, or longer when the database shows more: the age
of that transaction when the login may see it in `pg_stat_activity` (the owner,
`pg_read_all_stats`), or how long the oldest event behind it has waited), and how many events
wait at or above it (`signoff_journal_events_behind_horizon`). `/readyz` compares the latest
sample with `horizon_ready_seconds` (`readiness`). Past `horizon_warn_seconds` it logs a
warning, once per holding transaction. The database ends an idle transaction after a minute
by default (revision 0002); a transaction that keeps running statements is bounded by nothing
on PostgreSQL 15, which is what the warning is for.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from ledger.journal.horizon import read_horizon
from ledger.log import get_logger
from ledger.store import Database

from .metrics import Metrics

__all__ = ["SAMPLE_SECONDS", "HorizonSample", "HorizonWatch"]

log = get_logger(__name__)

SAMPLE_SECONDS = 5.0
"""How often the service looks at the horizon between scrapes."""


@dataclass(frozen=True, slots=True)
class HorizonSample:
    xmin: int
    held: bool  # a transaction holding an id is running
    lag_seconds: float
    events_behind: int


class HorizonWatch:
    """One service's view of the horizon over time."""

    def __init__(self, db: Database, metrics: Metrics, warn_seconds: float) -> None:
        self.db = db
        self.metrics = metrics
        self.warn_seconds = warn_seconds
        self._xmin: int | None = None
        self._since = 0.0
        self._warned: int | None = None
        self._failing = False
        self.latest: HorizonSample | None = None
        """The last sample taken, and when (`time.monotonic()`): what `/readyz` compares."""
        self.latest_at = -float("inf")

    async def sample(self) -> HorizonSample:
        """Look at the horizon now and set the metrics (and warn) from it."""
        async with self.db.connection() as conn:
            reading = await read_horizon(conn)
        xmin, behind, held = reading.xmin, reading.events_behind, reading.held
        now = time.monotonic()
        if not held:
            self._xmin = None
        elif xmin != self._xmin:
            self._xmin, self._since = xmin, now
        lag = now - self._since if held else 0.0
        lag = max(lag, reading.lag_seconds)  # what the database shows of it (0: not held)
        self.metrics.horizon_lag.set(lag)
        self.metrics.events_behind_horizon.set(behind)
        if held and lag >= self.warn_seconds and self._warned != xmin:
            self._warned = xmin
            log.warning(
                "journal horizon held: an open transaction delays the global order",
                transaction_id=xmin,
                seconds=round(lag, 1),
                events_behind=behind,
            )
        self.latest, self.latest_at = HorizonSample(xmin, held, lag, behind), now
        return self.latest

    async def run(self, every: float = SAMPLE_SECONDS) -> None:
        """Sample every `every` seconds until cancelled; a failure is logged once per outage."""
        while True:
            try:
                await self.sample()
                self._failing = False
            except Exception as e:  # the database away for a while: the next round retries
                if not self._failing:
                    log.warning("journal horizon not sampled", error_type=type(e).__name__)
                self._failing = True
            await asyncio.sleep(every)
