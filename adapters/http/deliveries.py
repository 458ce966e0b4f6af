"""Deliveries of journal events to one target, once across replicas: what webhooks and the
reviewers' notifiers (Slack, e-mail) share. A subclass says what it delivers and how it sends
one (`_send`); this runs the rest as one background task, which in turn:

1. reads the journal after the last position it knows (at start, the newest delivery recorded
   for its target; with none, the journal's position then) and records a delivery for each
   event of its `kinds` (`signoff_webhook_record`): one row per event and target, so every
   replica records the same rows and none twice;
2. claims the deliveries that are due (`signoff_webhook_claim`: leased, SKIP LOCKED, so two
   replicas never send one delivery at once) and sends each, recording every attempt: one that
   `_send` returns from delivers it (an HTTP status outside 2xx does not); anything else is
   tried again after a backoff that doubles, with jitter, until the attempts run out;
3. sleeps until `signoff_approval_requests`, `signoff_approvals` or `signoff_calls` is notified,
   a retry is due or a second has passed.

A notification only wakes the task early: any login may send one, so deliveries come only from
journal events after the task's cursor, and a burst of notifications wakes it at most once per
`MIN_PASS_GAP`. Logs name the delivery, the event's position, the attempt and the status, never
what was sent nor the target (a URL's path may be its secret).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable
from typing import Any, ClassVar, Protocol

import asyncpg
import httpx

from approvals import NOTIFY_CHANNEL, REQUESTS_CHANNEL, ApprovalStore
from ledger import __version__
from ledger.calls._sql import CHANNEL as CALLS_CHANNEL
from ledger.errors import ConfigurationError, DatabaseUnavailable
from ledger.journal import Journal
from ledger.log import get_logger
from ledger.store import Database
from ledger.store.notify import Listener, paced, woken

from . import _sql as sql

__all__ = ["MIN_PASS_GAP", "Deliveries", "NotSent", "Retries", "retry_delay"]

log = get_logger(__name__)

MIN_PASS_GAP = 0.05
"""Seconds between two passes woken by notifications (which anyone may send)."""
_LEASE_MARGIN_SECONDS = 30.0  # a claim outlives its attempt's timeout by this much
_CLAIM_LIMIT = 20
_RECORD_BATCH = 500


class Retries(Protocol):
    """How long one attempt may take, and when a failed one is tried again."""

    @property
    def timeout_seconds(self) -> float: ...
    @property
    def first_retry_seconds(self) -> float: ...
    @property
    def max_retry_seconds(self) -> float: ...
    @property
    def max_attempts(self) -> int: ...


def http_client(url: str, timeout: float, unusable: str) -> httpx.AsyncClient:
    """The client a delivery posts to `url` with: no redirect followed (it would carry the URL's
    or the token's secret elsewhere), no proxy or setting read from the environment.

    Raises:
        ConfigurationError(`unusable`): no request can be made to `url` though the settings let
            it through (a bad IDNA label).
    """
    try:
        httpx.Request("POST", url)
    except (httpx.InvalidURL, ValueError):
        raise ConfigurationError(unusable) from None
    return httpx.AsyncClient(
        timeout=timeout,
        follow_redirects=False,
        trust_env=False,  # Signoff reads no environment but its settings
        headers={"User-Agent": f"signoff/{__version__}"},
    )


def retry_delay(attempts: int, settings: Retries, rand: Callable[[], float]) -> float:
    """Seconds before the next attempt after `attempts` failed ones: the first retry's delay,
    doubled each time up to the maximum, then between half of it and all of it (jitter, so
    that deliveries failed together are not retried together)."""
    delay = min(settings.first_retry_seconds * 2.0 ** (attempts - 1), settings.max_retry_seconds)
    return float(delay * (0.5 + rand() / 2))


class NotSent(Exception):
    """An attempt that failed for a reason safe to record and log as it is (no secret, no
    content): what it tells of is not in the database, or the receiver's own error code."""

    def __init__(self, reason: str, status: int | None = None) -> None:
        super().__init__(reason)
        self.status = status


class Deliveries:
    """The delivery task of one service process: `start()` it, `close()` it."""

    noun: ClassVar[str] = "delivery"
    """What its log lines call one ("webhook": "webhook delivered")."""
    channel: ClassVar[str] = "delivery"
    """Its `channel` label on the service's metrics (`gauges`)."""
    kinds: ClassVar[tuple[str, ...]] = ("approval.requested",)
    """The journal events it delivers (of those `signoff_webhook_record` takes)."""

    def __init__(
        self,
        db: Database,
        store: ApprovalStore,
        target: str,
        retries: Retries,
        *,
        poll_interval: float = 1.0,
    ) -> None:
        self.db = db
        self.store = store
        self.target = target
        self.retries = retries
        self.poll_interval = poll_interval
        self.journal = Journal(db)
        self._listener = Listener.shared(db, REQUESTS_CHANNEL, NOTIFY_CHANNEL, CALLS_CHANNEL)
        self._task: asyncio.Task[None] | None = None
        self._random = random.SystemRandom()

    async def _open(self) -> None:
        """Make what sending needs (a client); raise ConfigurationError when it cannot be."""

    async def _shut(self) -> None:
        """Let go of what `_open` made."""

    def _described(self) -> dict[str, Any]:
        """What the start's log line says of it (never a secret)."""
        return {}

    async def _send(self, row: asyncpg.Record) -> int | None:
        """Send one claimed delivery; its HTTP status (None: not HTTP, sent).

        Raises:
            NotSent: it was not sent, for the reason given; any other exception also counts
                as a failed attempt, recorded by its type alone.
        """
        raise NotImplementedError

    async def start(self) -> None:
        """Begin delivering (from the journal's position now, for a target never delivered to).

        Raises:
            ConfigurationError: nothing can be sent to the target.
        """
        if self._task is not None:
            return
        await self._open()
        try:
            after = await self._start_position()
            await self._listener.start()
        except BaseException:
            await self._shut()
            raise
        self._task = asyncio.create_task(self._run(after), name=self.noun)
        log.info(f"{self.noun}s on", after=after, **self._described())

    async def until_listening(self) -> None:
        """Return once a started delivery loop listens for new requests: until then a request
        is delivered by the next poll, not at once (its LISTEN connection comes up apart)."""
        await self._listener.until_connected()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._listener.close()
        await self._shut()

    async def _start_position(self) -> int:
        async with self.db.connection() as conn:
            latest: int | None = await conn.fetchval(sql.LATEST, self.target)
        return latest if latest is not None else await self.journal.last_position()

    async def _run(self, after: int) -> None:
        with self._listener.subscribed() as notified:
            due_at: float | None = None  # when this process's soonest retry is due
            while True:
                notified.event.clear()
                notified.take()  # a hint to look now, no more: anyone may notify anything
                pass_at = time.monotonic()
                try:
                    after = await self._record(after)
                    claimed_at = time.monotonic()
                    soonest = await self._deliver_due()
                    if due_at is not None and due_at <= claimed_at:
                        due_at = None  # due then: this pass claimed it
                    if soonest is not None:
                        retry_at = time.monotonic() + soonest
                        due_at = retry_at if due_at is None else min(due_at, retry_at)
                except DatabaseUnavailable as e:  # the cursor holds; read again shortly
                    log.warning(f"{self.noun}s cannot reach the database; retrying", error=str(e))
                except Exception as e:  # the task must outlive any one failure
                    log.error(f"{self.noun} failed; retrying", error=repr(e)[:300])
                wait = self.poll_interval
                if due_at is not None:  # a wake in between must not make it wait a poll
                    wait = min(wait, max(due_at - time.monotonic(), 0.0))
                if await woken(notified.event, wait):
                    await paced(pass_at, MIN_PASS_GAP)

    async def _record(self, after: int) -> int:
        """Record a delivery for each event to deliver after `after`; the new cursor."""
        positions: list[int] = []
        async for event in self.journal.read_all(after=after, batch_size=_RECORD_BATCH):
            if event.type in self.kinds:
                positions.append(event.position)
            if len(positions) >= _RECORD_BATCH:
                await self._insert(positions)
                positions = []
            after = event.position
        if positions:
            await self._insert(positions)
        return after

    async def _insert(self, positions: list[int]) -> None:
        async with self.db.connection() as conn:
            await conn.fetchval(sql.RECORD, positions, self.target)

    async def _deliver_due(self) -> float | None:
        """Send every due delivery; the seconds until the soonest retry scheduled (None: no
        retry)."""
        lease = self.retries.timeout_seconds + _LEASE_MARGIN_SECONDS
        soonest: float | None = None
        while True:
            async with self.db.connection() as conn:
                claimed = await conn.fetch(sql.CLAIM, self.target, _CLAIM_LIMIT, lease)
            if not claimed:
                return soonest
            done = await asyncio.gather(
                *(self._attempt(r) for r in claimed), return_exceptions=True
            )
            for row, retry in zip(claimed, done, strict=True):
                if isinstance(retry, BaseException):  # not recorded: tried again once its
                    log.warning(  # lease lapses
                        f"{self.noun} attempt not recorded",
                        delivery=row["delivery_id"],
                        position=row["position"],
                        error=repr(retry)[:300],
                    )
                    if isinstance(retry, asyncio.CancelledError):
                        raise retry
                elif retry is not None:
                    soonest = retry if soonest is None else min(soonest, retry)
            if len(claimed) < _CLAIM_LIMIT:
                return soonest

    async def _attempt(self, row: asyncpg.Record) -> float | None:
        """Send one claimed delivery and record how it went; the seconds until its retry."""
        delivery_id, position, attempt = row["delivery_id"], row["position"], row["attempts"] + 1
        bound = log.bind(delivery=delivery_id, position=position, kind=row["kind"], attempt=attempt)
        status: int | None = None
        error: str | None = None
        try:
            status = await self._send(row)
            if status is not None and not 200 <= status < 300:
                error = f"HTTP {status}"
        except (httpx.HTTPError, TimeoutError) as e:  # its message may quote the URL: only
            error = type(e).__name__  # its kind is kept
        except NotSent as e:
            error, status = str(e), e.status
        except Exception as e:  # whatever else fails counts as an attempt, or it would loop
            error = type(e).__name__  # unrecorded for ever; only its kind is kept
        delivered = error is None
        retry = None
        if not delivered and attempt < self.retries.max_attempts:
            retry = retry_delay(attempt, self.retries, self._random.random)
        async with self.db.connection() as conn:
            kept = await conn.fetchval(
                sql.ATTEMPTED, delivery_id, row["leased_until"], status, error, delivered, retry
            )
        if not kept:  # its lease lapsed and another replica claimed it
            bound.warning(f"{self.noun} attempt outlived its lease", status=status)
        elif delivered:
            bound.info(f"{self.noun} delivered", status=status)
        elif retry is None:
            bound.error(f"{self.noun} delivery given up", status=status, error=error)
        else:
            bound.warning(
                f"{self.noun} attempt failed", status=status, error=error, retry_in=round(retry, 2)
            )
        return retry
