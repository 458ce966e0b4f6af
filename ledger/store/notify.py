"""Waking waiters in this process when another process commits something they wait for.

One dedicated LISTEN connection per listener (on one channel or several) and process. PostgreSQL
delivers a NOTIFY only after the notifying transaction commits, so a woken waiter always finds
the change. The connection can drop (server restart, network): the listener reconnects in the
background, and waiters must re-check the database on a timer anyway (they wait on their
`waiting` event with a timeout), so nothing is ever missed, only delayed by at most the poll
interval. `mark` and `quiet_since` tell when a payload surely was not notified in between.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

import asyncpg

from ..log import get_logger
from .db import open_raw_connection

__all__ = ["Listener", "Subscription", "woken"]

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


class Listener:
    """LISTEN on `channels`; wake the waiters registered for a payload (on any of them)."""

    def __init__(self, url: str, *channels: str, reconnect_delay: float = 0.25) -> None:
        if not channels:
            raise ValueError("a listener needs a channel")
        self.url = url
        self.channels = channels
        self.channel = ",".join(channels)  # for task names and logs
        self.reconnect_delay = reconnect_delay
        self._events: defaultdict[str, set[asyncio.Event]] = defaultdict(set)
        self._subscriptions: set[Subscription] = set()
        self._connection: asyncpg.Connection | None = None
        self._task: asyncio.Task[None] | None = None
        self._lost = asyncio.Event()
        self._up = asyncio.Event()
        self._epoch = 0  # connections made so far
        self._heard = 0  # notifications on this connection
        self._recent: dict[str, None] = {}  # their payloads, the newest last

    async def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._keep_listening(), name=f"listen:{self.channel}")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._drop()

    async def until_connected(self) -> None:
        """Return once the LISTEN connection is up (start the listener first)."""
        await self._up.wait()

    @property
    def connected(self) -> bool:
        return self._connection is not None and not self._connection.is_closed()

    def mark(self) -> tuple[int, int] | None:
        """Where the listener stands now, for `quiet_since`; None when it is not listening."""
        return (self._epoch, self._heard) if self.connected else None

    def quiet_since(self, payload: str, mark: tuple[int, int] | None) -> bool:
        """Whether `payload` was surely not notified since `mark`: the same connection has
        listened all along and has not heard it. False whenever that is not certain (another
        connection, more notifications than are remembered)."""
        if mark is None or not self.connected or mark[0] != self._epoch:
            return False
        return self._heard - mark[1] <= _RECENT_KEPT and payload not in self._recent

    @contextmanager
    def waiting(self, payload: str) -> Iterator[asyncio.Event]:
        """An event set whenever `payload` is notified (or the listener reconnected).

        Enter it before checking the database, check, then wait on the event: a notification
        that arrives between the check and the wait is not lost.
        """
        event = asyncio.Event()
        self._events[payload].add(event)
        try:
            yield event
        finally:
            waiting = self._events.get(payload)
            if waiting is not None:
                waiting.discard(event)
                if not waiting:
                    del self._events[payload]

    @contextmanager
    def subscribed(self) -> Iterator[Subscription]:
        """Every payload notified from now on, until the block ends. As with `waiting`: enter
        it, read the database, then wait on its event."""
        subscription = Subscription()
        self._subscriptions.add(subscription)
        try:
            yield subscription
        finally:
            self._subscriptions.discard(subscription)

    def _notified(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        self._heard += 1
        recent = self._recent
        recent.pop(payload, None)
        recent[payload] = None
        if len(recent) > _RECENT_KEPT:
            del recent[next(iter(recent))]
        for event in self._events.get(payload, ()):
            event.set()
        for subscription in self._subscriptions:
            subscription._add(payload)

    def _terminated(self, _conn: object) -> None:
        self._lost.set()

    async def _keep_listening(self) -> None:
        while True:
            connection: asyncpg.Connection | None = None
            try:
                connection = await open_raw_connection(self.url)
                connection.add_termination_listener(self._terminated)
                for channel in self.channels:
                    await connection.add_listener(channel, self._notified)
            except Exception as e:  # any failure: waiters poll meanwhile; try again shortly
                log.warning("listener cannot connect; retrying", channel=self.channel, error=str(e))
                if connection is not None and not connection.is_closed():
                    connection.terminate()
                await asyncio.sleep(self.reconnect_delay)
                continue
            self._connection = connection
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
            log.warning("listener connection lost; reconnecting", channel=self.channel)
            await self._drop()

    async def _drop(self) -> None:
        self._up.clear()
        connection, self._connection = self._connection, None
        if connection is not None and not connection.is_closed():
            with contextlib.suppress(Exception):
                await connection.close(timeout=1)


async def woken(event: asyncio.Event, seconds: float) -> bool:
    """Wait for `event` up to `seconds`; whether it was set. With `asyncio.timeout`, not
    `asyncio.wait_for`: Python 3.11's `wait_for` drops a cancellation that arrives as the event
    is set, and a loop cancelled that way (a service closing) never ends."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await event.wait()
    return event.is_set()
