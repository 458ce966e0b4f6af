"""Webhook notifications of `signoff serve`: a new approval request, a call whose outcome is
unknown, posted to `SIGNOFF_WEBHOOK_URL` and signed with its secret.

`Webhooks` runs in the service as one background task, which in turn:

1. reads the journal after the last position it knows (at start, the newest delivery recorded
   for its URL; with none, the journal's position then) and records a delivery for each
   `approval.requested` and `call.outcome_unknown` event (`signoff_webhook_record`): one row
   per event and URL, so every replica records the same rows and none twice;
2. claims the deliveries that are due (`signoff_webhook_claim`: leased, SKIP LOCKED, so two
   replicas never post one delivery at once) and posts each, recording every attempt: a 2xx
   answer delivers it; anything else (another status, a timeout, a refused connection, a
   redirect, which is not followed) is tried again after a backoff that doubles, with jitter,
   until the attempts run out;
3. sleeps until `signoff_approval_requests`, `signoff_approvals` or `signoff_calls` is notified,
   a retry is due or a second has passed.

A notification only wakes the task early: any login may send one, so deliveries come only from
journal events after the task's cursor, and a burst of notifications wakes it at most once per
`MIN_PASS_GAP`.

A body is built when it is sent, from what the database holds then, and never carries
arguments. Logs name the delivery, the event's position, the attempt and the status; never the
body, the secret or the URL (whose path may be its secret).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import httpx

from approvals import NOTIFY_CHANNEL, REQUESTS_CHANNEL, ApprovalStore, UnknownApproval
from approvals.projection import STREAM_PREFIX, approval_id_of
from ledger import __version__
from ledger.calls._sql import CHANNEL as CALLS_CHANNEL
from ledger.errors import ConfigurationError, DatabaseUnavailable
from ledger.journal import Journal
from ledger.journal.reader import event_at
from ledger.log import get_logger
from ledger.store import Database
from ledger.store.notify import Listener, paced, woken
from ledger.store.settings import WebhookSettings

from . import _sql as sql
from .shapes import approval_document
from .webhook_bodies import encoded, signature_header, signoff_body, slack_body

__all__ = ["KINDS", "MIN_PASS_GAP", "Webhooks", "retry_delay"]

log = get_logger(__name__)

KINDS = ("approval.requested", "call.outcome_unknown")
"""The journal events that are delivered."""

MIN_PASS_GAP = 0.05
"""Seconds between two passes woken by notifications (which anyone may send)."""
_LEASE_MARGIN_SECONDS = 30.0  # a claim outlives its attempt's timeout by this much
_CLAIM_LIMIT = 20
_RECORD_BATCH = 500


def retry_delay(attempts: int, settings: WebhookSettings, rand: Callable[[], float]) -> float:
    """Seconds before the next attempt after `attempts` failed ones: the first retry's delay,
    doubled each time up to the maximum, then between half of it and all of it (jitter, so
    that deliveries failed together are not retried together)."""
    delay = min(settings.first_retry_seconds * 2.0 ** (attempts - 1), settings.max_retry_seconds)
    return float(delay * (0.5 + rand() / 2))


class Webhooks:
    """The delivery task of one service process: `start()` it, `close()` it."""

    def __init__(
        self,
        db: Database,
        store: ApprovalStore,
        settings: WebhookSettings,
        *,
        poll_interval: float = 1.0,
    ) -> None:
        self.db = db
        self.store = store
        self.settings = settings
        self.poll_interval = poll_interval
        self.journal = Journal(db)
        self._listener = Listener.shared(db, REQUESTS_CHANNEL, NOTIFY_CHANNEL, CALLS_CHANNEL)
        self._task: asyncio.Task[None] | None = None
        self._client: httpx.AsyncClient | None = None
        self._random = random.SystemRandom()

    async def start(self) -> None:
        """Begin delivering (from the journal's position now, for a URL never delivered to).

        Raises:
            ConfigurationError: no request can be made to the URL.
        """
        if self._task is not None:
            return
        try:  # what the settings let through but no request can be made to (a bad IDNA label)
            httpx.Request("POST", self.settings.url)
        except (httpx.InvalidURL, ValueError):
            raise ConfigurationError(
                "SIGNOFF_WEBHOOK_URL cannot be posted to (its host or port)"
            ) from None
        after = await self._start_position()
        self._client = httpx.AsyncClient(
            timeout=self.settings.timeout_seconds,
            follow_redirects=False,
            trust_env=False,  # Signoff reads no environment but its settings
            headers={"User-Agent": f"signoff/{__version__}"},
        )
        await self._listener.start()
        self._task = asyncio.create_task(self._run(after), name="webhooks")
        log.info(
            "webhooks on",
            host=urlsplit(self.settings.url).hostname,
            format=self.settings.format,
            after=after,
        )

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._listener.close()
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _start_position(self) -> int:
        async with self.db.connection() as conn:
            latest: int | None = await conn.fetchval(sql.LATEST, self.settings.url)
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
                    log.warning("webhooks cannot reach the database; retrying", error=str(e))
                except Exception as e:  # the task must outlive any one failure
                    log.error("webhook delivery failed; retrying", error=repr(e)[:300])
                wait = self.poll_interval
                if due_at is not None:  # a wake in between must not make it wait a poll
                    wait = min(wait, max(due_at - time.monotonic(), 0.0))
                if await woken(notified.event, wait):
                    await paced(pass_at, MIN_PASS_GAP)

    async def _record(self, after: int) -> int:
        """Record a delivery for each event to deliver after `after`; the new cursor."""
        positions: list[int] = []
        async for event in self.journal.read_all(after=after, batch_size=_RECORD_BATCH):
            if event.type in KINDS:
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
            await conn.fetchval(sql.RECORD, positions, self.settings.url)

    async def _deliver_due(self) -> float | None:
        """Post every due delivery; the seconds until the soonest retry scheduled (None: no
        retry)."""
        lease = self.settings.timeout_seconds + _LEASE_MARGIN_SECONDS
        soonest: float | None = None
        while True:
            async with self.db.connection() as conn:
                claimed = await conn.fetch(sql.CLAIM, self.settings.url, _CLAIM_LIMIT, lease)
            if not claimed:
                return soonest
            done = await asyncio.gather(
                *(self._attempt(r) for r in claimed), return_exceptions=True
            )
            for row, retry in zip(claimed, done, strict=True):
                if isinstance(retry, BaseException):  # not recorded: tried again once its
                    log.warning(  # lease lapses
                        "webhook attempt not recorded",
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
        """Post one claimed delivery and record how it went; the seconds until its retry."""
        delivery_id, position, attempt = row["delivery_id"], row["position"], row["attempts"] + 1
        bound = log.bind(delivery=delivery_id, position=position, kind=row["kind"], attempt=attempt)
        status: int | None = None
        error: str | None = None
        try:
            body = encoded(await self._body(row))
            status = await self._post(delivery_id, body)
            if not 200 <= status < 300:
                error = f"HTTP {status}"
        except (httpx.HTTPError, TimeoutError) as e:  # its message may quote the URL: only
            error = type(e).__name__  # its kind is kept
        except _Unsendable as e:
            error = str(e)
        except Exception as e:  # whatever else fails counts as an attempt, or it would loop
            error = type(e).__name__  # unrecorded for ever; only its kind is kept
        delivered = error is None
        retry = None
        if not delivered and attempt < self.settings.max_attempts:
            retry = retry_delay(attempt, self.settings, self._random.random)
        async with self.db.connection() as conn:
            kept = await conn.fetchval(
                sql.ATTEMPTED, delivery_id, row["leased_until"], status, error, delivered, retry
            )
        if not kept:  # its lease lapsed and another replica claimed it
            bound.warning("webhook attempt outlived its lease", status=status)
        elif delivered:
            bound.info("webhook delivered", status=status)
        elif retry is None:
            bound.error("webhook delivery given up", status=status, error=error)
        else:
            bound.warning(
                "webhook attempt failed", status=status, error=error, retry_in=round(retry, 2)
            )
        return retry

    async def _post(self, delivery_id: int, body: bytes) -> int:
        if self._client is None:
            raise RuntimeError("Webhooks.start() first")
        headers = {
            "Content-Type": "application/json",
            "X-Signoff-Delivery": str(delivery_id),
            "X-Signoff-Signature": signature_header(self.settings.secret, body, int(time.time())),
        }
        # httpx times each read alone: a receiver answering a byte at a time would hold the
        # attempt past its lease (another replica posts it again) and every delivery after it.
        # The answer's body is never read: only its status counts.
        async with (
            asyncio.timeout(self.settings.timeout_seconds),
            self._client.stream(
                "POST", self.settings.url, content=body, headers=headers
            ) as response,
        ):
            return response.status_code

    async def _body(self, row: asyncpg.Record) -> dict[str, Any]:
        kind, position = row["kind"], row["position"]
        async with self.db.connection() as conn:
            event = await event_at(conn, position)
            if event is None:
                raise _Unsendable(f"no event at position {position}")
            stream_id, at = event.stream_id, event.recorded_at
            if kind == "call.outcome_unknown":
                subject = await _call(conn, stream_id)
        if kind == "approval.requested":
            if not stream_id.startswith(STREAM_PREFIX):
                raise _Unsendable(f"the event at {position} is not an approval's")
            try:
                approval = await self.store.get(approval_id_of(stream_id))
            except UnknownApproval:
                raise _Unsendable(f"no approval for the event at {position}") from None
            subject = approval_document(approval, args=None)
        make = slack_body if self.settings.format == "slack" else signoff_body
        return make(kind, row["delivery_id"], position, at, subject)


class _Unsendable(Exception):
    """A delivery whose body cannot be made (what it tells of is not in the database)."""


async def _call(conn: asyncpg.Connection, stream_id: str) -> dict[str, Any]:
    """The call of stream `stream_id`: its run, id, tool and status (never its arguments)."""
    run_id, _, call_id = stream_id.removeprefix("call:").partition("/")
    decoded = [part.replace("%2F", "/").replace("%25", "%") for part in (run_id, call_id)]
    row = await conn.fetchrow(sql.CALL, *decoded, stream_id)
    if row is None:
        raise _Unsendable("no call for the event")
    return {k: row[k] for k in ("run_id", "call_id", "tool", "status")}
