"""`/readyz`: the health checks of `ledger.health`, run on the service's own pool, key ring and
horizon watch, so that readiness means this process can do its work on the login it really
uses.

The horizon check compares the watch's latest sample (`horizon.HorizonWatch`, taken every few
seconds and on every scrape) with the settings (`ledger.health.check_horizon`: a warning
unless `horizon_ready_seconds` is set); when there is none yet, or it is
stale because sampling fails, it samples now.

The endpoint is unauthenticated, so the checks run at most once per `MIN_INTERVAL` however
often it is asked: callers meanwhile get the last result. A change of readiness is logged with
the failed checks' details, which the endpoint never shows.
"""

from __future__ import annotations

import asyncio
import time

from ledger.health import Check, Health, check_all, check_horizon
from ledger.keys import KeyRing
from ledger.log import get_logger
from ledger.store import Database
from ledger.store.settings import Settings

from .horizon import SAMPLE_SECONDS, HorizonWatch

__all__ = ["MIN_INTERVAL", "Readiness"]

log = get_logger(__name__)

MIN_INTERVAL = 1.0
"""Seconds a result is reused for: a flood of `/readyz` costs at most one round a second."""
_STALE = 3 * SAMPLE_SECONDS


class Readiness:
    """One service's readiness."""

    def __init__(
        self, db: Database, ring: KeyRing, watch: HorizonWatch, settings: Settings
    ) -> None:
        self.db, self.ring, self.watch, self.settings = db, ring, watch, settings
        self._lock = asyncio.Lock()
        self._last: Health | None = None
        self._last_at = -float("inf")

    async def health(self) -> Health:
        """Every check's result, at most `MIN_INTERVAL` old."""
        async with self._lock:
            if self._last is not None and time.monotonic() - self._last_at < MIN_INTERVAL:
                return self._last
            health = await check_all(self.db, ring=self._fresh_ring, horizon=self._horizon)
            self._tell(health)
            self._last, self._last_at = health, time.monotonic()
            return health

    async def _fresh_ring(self) -> KeyRing:
        await self.ring.fresh()  # reloads when older than its refresh interval
        return self.ring

    async def _horizon(self) -> Check:
        sample = self.watch.latest
        if sample is None or time.monotonic() - self.watch.latest_at > _STALE:
            sample = await self.watch.sample()
        return check_horizon(sample.held, sample.lag_seconds, sample.events_behind, self.settings)

    def _tell(self, health: Health) -> None:
        """Log a change of which checks fail, with their details (never shown by `/readyz`)."""
        was = None if self._last is None else self._last.failed
        if health.failed == was:
            return
        if health.ok:
            log.info("ready")
            return
        for check in health.checks:
            if check.failed:
                log.warning("not ready", check=check.name, detail=check.detail)
