"""New and changed approvals as they commit, for Server-Sent Events; no web framework.

`ApprovalFeed.changes` reads the journal's global order (`Journal.read_all`) from a cursor and
yields the events of approval streams. The cursor is a journal position, so it is the SSE event
id: a client that reconnects with `Last-Event-ID` misses nothing, whichever replica it reaches,
because every replica reads the same journal. Between reads the feed sleeps until PostgreSQL
notifies `signoff_approval_requests` or `signoff_approvals` (a new request, a final decision:
committed through any process) or its poll interval passes (votes in an open quorum,
consumptions, a lost listening connection).

A notification is only a hint to read now: any login may `pg_notify` any channel, with any
payload, so the feed yields nothing but what it reads from the journal after its cursor, and a
burst of notifications makes it read at most once per `MIN_READ_GAP`.

The journal reads only below the oldest transaction open anywhere on the server (its
horizon), so one long transaction (a `pg_dump`, a session left idle in a transaction) holds
every reader back: its changes reach streams when the horizon moves (the service's
`signoff_journal_horizon_lag_seconds` shows for how long; the database ends idle transactions
after a minute by default).

`on_delay`, when given, is told how late each approval event is when this feed first yields it
to a stream: the seconds since its `recorded_at` (the database server's clock, as the writing
transaction appended it). A stream's backlog (`since` in the past) is not measured: it was not
waiting for those events.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from approvals import NOTIFY_CHANNEL, REQUESTS_CHANNEL
from approvals.projection import STREAM_PREFIX, approval_id_of
from ledger.errors import DatabaseUnavailable, SignoffError
from ledger.journal import Event, Journal
from ledger.log import get_logger
from ledger.store import Database
from ledger.store.notify import Listener, paced, woken

__all__ = [
    "KEEPALIVE",
    "MIN_READ_GAP",
    "ApprovalChange",
    "ApprovalFeed",
    "InvalidStreamField",
    "sse_format",
]

log = get_logger(__name__)

KEEPALIVE = b": keepalive\n\n"
"""An SSE comment: send it on an idle stream so proxies keep the connection open."""
MIN_READ_GAP = 0.02
"""Seconds between two reads of one feed woken by notifications (which anyone may send)."""


class InvalidStreamField(SignoffError, ValueError):
    """An SSE event id or name that would break the stream's framing (a line break, NUL)."""


@dataclass(frozen=True)
class ApprovalChange:
    """A change of one approval: an event of its stream, read from the journal.

    Attributes:
        approval_id: the approval it changed (read it from the store for what it now is).
        position: the event's journal position: the SSE event id, and `since` to resume after
            it.
        event: `approval.requested`, `approval.decided`, `approval.expired`,
            `approval.cancelled` or `approval.consumed`.
        at: when the event was recorded.
    """

    approval_id: str
    position: int
    event: str
    at: datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "approval_id": self.approval_id,
            "position": self.position,
            "event": self.event,
            "at": self.at.isoformat(),
        }


class ApprovalFeed:
    """Approval changes from one database, as any process commits them.

    One feed per process serves any number of streams: each `changes` call keeps its own
    cursor and shares the feed's one listening connection (opened on first use).
    """

    def __init__(
        self,
        db: Database,
        *,
        poll_interval: float = 1.0,
        batch_size: int = 500,
        on_delay: Callable[[float], None] | None = None,
    ) -> None:
        self.journal = Journal(db)
        self.poll_interval = poll_interval
        self.batch_size = batch_size
        self._listener = Listener.shared(db, NOTIFY_CHANNEL, REQUESTS_CHANNEL)
        self._on_delay = on_delay
        self._measured = 0  # the last position measured: each event once, by its first stream

    async def close(self) -> None:
        await self._listener.close()

    @property
    def listening(self) -> bool:
        """Whether notifications reach this feed now (else it finds changes by its poll)."""
        return self._listener.connected

    async def listen(self) -> None:
        """Start listening (else the first `changes` does) and return once notifications
        reach this feed: for a readiness check, and before a change that must wake it."""
        await self._listener.start()
        await self._listener.until_connected()

    async def check_since(self, since: int) -> None:
        """Whether `changes(since=since)` can start: checked before a response is begun.

        Raises:
            InvalidEvent: `since` is not the position of an event of this journal.
        """
        async for _ in self.journal.read_all(after=since, batch_size=1):
            break

    async def position(self) -> int:
        """The journal position now: `changes(since=...)` from it yields what commits later."""
        return await self.journal.last_position()

    async def changes(self, *, since: int | None) -> AsyncGenerator[ApprovalChange, None]:
        """The approval changes after journal position `since` (None: from now on), in the
        journal's order, without end; each event once.

        Raises:
            InvalidEvent: `since` is not the position of an event of this journal (a stale or
                forged `Last-Event-ID`), raised by the first step, before anything is
                yielded.
        """
        await self._listener.start()
        with self._listener.subscribed() as notified:
            # Subscribe before reading the start: what commits in between is read, not missed.
            after = await self.position() if since is None else since
            nudged, owed = False, _Owed()
            live = since is None  # a resumed stream's first read is its backlog
            while True:
                notified.event.clear()
                notified.take()  # a hint to read now, no more: anyone may notify anything
                read_at = time.monotonic()
                read = False
                try:
                    async for event in self.journal.read_all(
                        after=after, batch_size=self.batch_size
                    ):
                        after = event.position
                        if event.stream_id.startswith(STREAM_PREFIX):
                            read = True
                            if live:
                                self._measure(event)
                            yield ApprovalChange(
                                approval_id_of(event.stream_id),
                                event.position,
                                event.type,
                                event.recorded_at,
                            )
                except DatabaseUnavailable as e:  # the cursor holds; read again shortly
                    log.warning("approval feed cannot read the journal; retrying", error=str(e))
                live = True
                delay = owed.next_delay(nudged, read, self.poll_interval)
                nudged = await woken(notified.event, delay)
                if nudged:
                    await paced(read_at, MIN_READ_GAP)

    def _measure(self, event: Event) -> None:
        if self._on_delay is None or event.position <= self._measured:
            return
        self._measured = event.position
        late = (datetime.now(UTC) - event.recorded_at).total_seconds()
        self._on_delay(max(0.0, late))  # another machine's clock may be ahead of ours


class _Owed:
    """How long to sleep before the next read. Woken, yet nothing to read: an older
    transaction still open somewhere holds the journal's horizon below the notified change.
    Look again soon (10 ms, doubling to 1 s), not only at the next poll, until it is read or
    10 s (at most a poll interval) have passed: a reconnect's wake may owe nothing."""

    def __init__(self) -> None:
        self.retry = 0.0
        self.waited = 0.0

    def next_delay(self, nudged: bool, found: bool, poll_interval: float) -> float:
        if found or not (nudged or self.retry):
            self.retry = self.waited = 0.0
            return poll_interval
        self.retry = min(2 * self.retry or 0.01, 1.0)
        self.waited += self.retry
        if self.waited > min(poll_interval, 10.0):
            self.retry = self.waited = 0.0
            return poll_interval
        return self.retry


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def sse_format(event_id: int | str | None, event: str | None, data: Any) -> bytes:
    """One Server-Sent Event: `id`, `event` and `data` lines and the blank line that ends it.

    `data` is text, or a JSON value sent as compact JSON. Text with line breaks (LF, CR or CRLF,
    all of which SSE reads as one) goes as several `data:` lines, which the client joins with
    LF: an embedded line cannot end the event or start a field.

    Raises:
        InvalidStreamField: an id or event name with a line break or NUL (the id's NUL makes
            clients ignore it), data that is not JSON, text with a lone surrogate.
    """
    lines: list[str] = []
    if event_id is not None:
        lines.append(f"id: {_field(str(event_id), 'an event id')}")
    if event is not None:
        lines.append(f"event: {_field(event, 'an event name')}")
    if not isinstance(data, str):
        try:
            data = json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as e:
            raise InvalidStreamField(f"event data is not JSON: {e}") from e
    lines.extend(f"data: {line}" for line in _LINE_BREAK.split(data))
    try:
        return ("\n".join(lines) + "\n\n").encode("utf-8")
    except UnicodeEncodeError as e:  # a lone surrogate: no UTF-8 for it
        raise InvalidStreamField(f"event text is not UTF-8: {e}") from e


def _field(value: str, what: str) -> str:
    if not isinstance(value, str) or _LINE_BREAK.search(value) or "\x00" in value:
        raise InvalidStreamField(f"{what} holds a line break or NUL: {value[:100]!r}")
    return value
