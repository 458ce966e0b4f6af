"""Waking waiters in this process when another process commits something they wait for.

One dedicated LISTEN connection per database and process: `Listener.shared(db, *channels)` gives
each user (the tool ledger, the approval store, the HTTP feed, the webhooks) a listener on its
channels, all on the same connection, which LISTENs on every channel any of them needs and is
closed when the last of them closes (`Listener(url, ...)` alone keeps a connection of its own).
Each user sees only its channels' notifications. PostgreSQL
delivers a NOTIFY only after the notifying transaction commits, so a woken waiter always finds
the change. The connection can drop (server restart, network): the listener reconnects in the
background, and waiters must re-check the database on a timer anyway (they wait on their
`waiting` event with a timeout), so nothing is ever missed, only delayed by at most the poll
interval. `mark` and `quiet_since` tell when a payload surely was not notified in between.

A notification is a hint, never a fact: any login may `pg_notify` any channel with any payload.
Whoever is woken reads the database for what changed and acts on what it finds there only;
a loop woken by notifications paces its reads (`paced`), so a flood of them costs a read per
gap, not one per notification.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
import weakref
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import asyncpg

from ..log import get_logger
from .config import HOST_CONNECT_SECONDS
from .db import open_raw_connection

if TYPE_CHECKING:
    from .db import Database

__all__ = ["Listener", "Subscription", "paced", "woken"]

log = get_logger(__name__)
_RECENT_KEPT = 4096  # payloads a listener remembers hearing (`Listener.quiet_since`)


class Subscription:
    """Every payload notified since it was last taken, for one subscriber of all of them.

    At most `limit` distinct payloads are kept until taken; more are dropped (a subscriber
    re-reads the database anyway). `event` is set on every notification and on a reconnect.
    """

    def __init__(self, limit: int = 1000) -> None:
        self.event = asyncio.Event()
        self.limit = limit
        self._payloads: dict[str, None] = {}

    def take(self) -> list[str]:
        """The payloads notified since the last take, each once, oldest first."""
        taken, self._payloads = list(self._payloads), {}
        return taken

    def _add(self, payload: str) -> None:
        if len(self._payloads) < self.limit:
            self._payloads[payload] = None
        self.event.set()


class _Connection:
    """The LISTEN connection the listeners of one database share: it listens on the union of
    their channels, wakes each waiter and subscription for its own channels only (two channels
    may carry the same stream id: a new approval's and its decision's), and runs while any
    listener is started."""

    def __init__(
        self, url: str, reconnect_delay: float, host_seconds: float = HOST_CONNECT_SECONDS
    ) -> None:
        self.url = url
        self.reconnect_delay = reconnect_delay
        self.host_seconds = host_seconds  # per host of a multi-host URL
        self.channels: set[str] = set()
        self.users = 0  # started listeners
        self._events: defaultdict[tuple[str, str], set[asyncio.Event]] = defaultdict(set)
        self._subscriptions: dict[Subscription, frozenset[str]] = {}
        self._connection: asyncpg.Connection | None = None
        self._listened: set[str] = set()  # the channels LISTENed on the current connection
        self._lock = asyncio.Lock()  # connecting and adding channels, one at a time
        self._task: asyncio.Task[None] | None = None
        self._lost = asyncio.Event()
        self._up = asyncio.Event()
        self._epoch = 0  # connections made so far
        self._heard = 0  # notifications on this connection
        self._recent: dict[tuple[str, str], None] = {}  # (channel, payload), the newest last

    @property
    def name(self) -> str:
        return ",".join(sorted(self.channels))  # for task names and logs

    async def start(self, channels: tuple[str, ...]) -> None:
        self.users += 1
        self.channels.update(channels)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(  # shared: no caller's context (its trace)
                self._keep_listening(), name=f"listen:{self.name}", context=contextvars.Context()
            )
            return
        async with self._lock:  # connected already (or connecting): listen on what is new
            connection = self._connection
            if connection is not None and not connection.is_closed():
                # Lost meanwhile: the reconnect listens on every channel, this one included.
                with contextlib.suppress(Exception):
                    await self._listen(connection)

    async def stop(self) -> None:
        self.users -= 1
        if self.users > 0:
            return
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._drop()

    async def until_listening(self) -> None:
        """Return once connected and listening on every channel of a started listener."""
        while True:
            await self._up.wait()
            async with self._lock:
                connection = self._connection
                if connection is not None and not connection.is_closed():
                    await self._listen(connection)  # nothing to do unless a channel is new
                    return
            await asyncio.sleep(self.reconnect_delay)  # lost just now: the task reconnects

    @property
    def connected(self) -> bool:
        return self._connection is not None and not self._connection.is_closed()

    def mark(self) -> tuple[int, int] | None:
        return (self._epoch, self._heard) if self.connected else None

    def quiet_since(
        self, channels: tuple[str, ...], payload: str, mark: tuple[int, int] | None
    ) -> bool:
        if mark is None or not self.connected or mark[0] != self._epoch:
            return False
        heard = any((channel, payload) in self._recent for channel in channels)
        return self._heard - mark[1] <= _RECENT_KEPT and not heard

    @contextmanager
    def waiting(self, channels: tuple[str, ...], payload: str) -> Iterator[asyncio.Event]:
        event = asyncio.Event()
        keys = [(channel, payload) for channel in channels]
        for key in keys:
            self._events[key].add(event)
        try:
            yield event
        finally:
            for key in keys:
                waiting = self._events.get(key)
                if waiting is not None:
                    waiting.discard(event)
                    if not waiting:
                        del self._events[key]

    @contextmanager
    def subscribed(self, channels: tuple[str, ...]) -> Iterator[Subscription]:
        subscription = Subscription()
        self._subscriptions[subscription] = frozenset(channels)
        try:
            yield subscription
        finally:
            self._subscriptions.pop(subscription, None)

    def _notified(self, _conn: object, _pid: int, channel: str, payload: str) -> None:
        self._heard += 1
        recent, key = self._recent, (channel, payload)
        recent.pop(key, None)
        recent[key] = None
        if len(recent) > _RECENT_KEPT:
            del recent[next(iter(recent))]
        for event in self._events.get(key, ()):
            event.set()
        for subscription, channels in self._subscriptions.items():
            if channel in channels:
                subscription._add(payload)

    def _terminated(self, _conn: object) -> None:
        self._lost.set()

    async def _listen(self, connection: asyncpg.Connection) -> None:
        for channel in sorted(self.channels - self._listened):
            await connection.add_listener(channel, self._notified)
            self._listened.add(channel)

    async def _keep_listening(self) -> None:
        failing = False  # said so once for this outage: the retries are quiet
        while True:
            connection: asyncpg.Connection | None = None
            try:
                async with self._lock:
                    connection = await open_raw_connection(self.url, host_seconds=self.host_seconds)
                    connection.add_termination_listener(self._terminated)
                    self._listened = set()
                    await self._listen(connection)
                    self._connection = connection
            except Exception as e:  # any failure: waiters poll meanwhile; try again shortly
                if not failing:
                    log.warning(
                        "listener cannot connect; retrying",
                        channel=self.name,
                        error_type=type(e).__name__,
                        error=str(e),
                    )
                failing = True
                if connection is not None and not connection.is_closed():
                    connection.terminate()
                await asyncio.sleep(self.reconnect_delay)
                continue
            if failing:
                log.info("listener connected again", channel=self.name)
                failing = False
            self._epoch += 1
            self._heard = 0
            self._recent.clear()
            self._lost.clear()
            self._up.set()
            # Wake everyone after a reconnect: a notification may have been sent while down.
            for events in list(self._events.values()):
                for event in events:
                    event.set()
            for subscription in self._subscriptions:
                subscription.event.set()
            await self._lost.wait()
            log.warning("listener connection lost; reconnecting", channel=self.name)
            await self._drop()

    async def _drop(self) -> None:
        self._up.clear()
        connection, self._connection = self._connection, None
        if connection is not None and not connection.is_closed():
            with contextlib.suppress(Exception):
                await connection.close(timeout=1)


# The connection of each open database, while any of its listeners exists.
_SHARED: weakref.WeakKeyDictionary[Database, _Connection] = weakref.WeakKeyDictionary()


class Listener:
    """LISTEN on `channels`; wake the waiters registered for a payload (on any of them).

    `Listener(url, ...)` has a connection of its own; `Listener.shared(db, ...)` shares the one
    connection of `db` with every other shared listener of it (see the module's docstring).
    """

    def __init__(
        self,
        url: str,
        *channels: str,
        reconnect_delay: float = 0.25,
        connection: _Connection | None = None,
    ) -> None:
        if not channels:
            raise ValueError("a listener needs a channel")
        self.url = url
        self.channels = channels
        self.channel = ",".join(channels)  # for task names and logs
        self.reconnect_delay = reconnect_delay
        self._shared = connection if connection is not None else _Connection(url, reconnect_delay)
        self._started = False

    @classmethod
    def shared(cls, db: Database, *channels: str) -> Listener:
        """A listener on `channels` over the one LISTEN connection of `db` in this process
        (connected when the first listener of it starts, closed when the last one closes)."""
        connection = _SHARED.get(db)
        if connection is None:
            connection = _SHARED[db] = _Connection(
                db.url, reconnect_delay=0.25, host_seconds=db.settings.host_connect_seconds
            )
        return cls(db.url, *channels, connection=connection)

    async def start(self) -> None:
        if not self._started:
            self._started = True
            await self._shared.start(self.channels)

    async def close(self) -> None:
        if self._started:
            self._started = False
            await self._shared.stop()

    async def until_connected(self) -> None:
        """Return once the LISTEN connection is up on this listener's channels (start the
        listener first)."""
        await self._shared.until_listening()

    @property
    def connected(self) -> bool:
        return self._started and self._shared.connected

    def mark(self) -> tuple[int, int] | None:
        """Where the listener stands now, for `quiet_since`; None when it is not listening."""
        return self._shared.mark() if self._started else None

    def quiet_since(self, payload: str, mark: tuple[int, int] | None) -> bool:
        """Whether `payload` was surely not notified since `mark`: the same connection has
        listened all along and has not heard it. False whenever that is not certain (another
        connection, more notifications than are remembered)."""
        return self._started and self._shared.quiet_since(self.channels, payload, mark)

    @contextmanager
    def waiting(self, payload: str) -> Iterator[asyncio.Event]:
        """An event set whenever `payload` is notified (or the listener reconnected).

        Enter it before checking the database, check, then wait on the event: a notification
        that arrives between the check and the wait is not lost.
        """
        with self._shared.waiting(self.channels, payload) as event:
            yield event

    @contextmanager
    def subscribed(self) -> Iterator[Subscription]:
        """Every payload notified on this listener's channels from now on, until the block
        ends. As with `waiting`: enter it, read the database, then wait on its event."""
        with self._shared.subscribed(self.channels) as subscription:
            yield subscription


async def woken(event: asyncio.Event, seconds: float) -> bool:
    """Wait for `event` up to `seconds`; whether it was set. With `asyncio.timeout`, not
    `asyncio.wait_for`: Python 3.11's `wait_for` drops a cancellation that arrives as the event
    is set, and a loop cancelled that way (a service closing) never ends."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await event.wait()
    return event.is_set()


async def paced(since: float, gap: float) -> None:
    """Sleep until `gap` seconds after `since` (a `time.monotonic()` reading): what a loop woken
    by a notification does before it reads again, so that notifications, which any login may
    send, cannot make it read the database without pause."""
    left = since + gap - time.monotonic()
    if left > 0:
        await asyncio.sleep(left)
