"""Group commit: concurrent calls of one write function, sent as one statement.

A step that commits on a connection of its own (a new call's intent, a call's outcome, a
journal append) costs its caller a round trip and the server a transaction and a WAL flush.
Steps that arrive while others are in flight are sent together: one statement that calls the
function once per step, so they share the round trip, the transaction and the flush. Nothing
waits to fill a group: a step that arrives while nothing is in flight is sent at once by its own
caller, as it would be without groups, and one that arrives while fewer than `in_flight` groups
are being sent goes at once too, with whatever else is queued.

Each step has committed when its caller goes on (its result is what the function returned for
it). A group is all or nothing, so when the server refuses its statement (then nothing of it
was written), its steps are sent again one by one: each caller gets its own result or its own
error, as if it had been alone. When the connection fails, whether the group committed is not
known, and every step's caller gets that error, as it would alone. A step whose caller was
cancelled before its group was sent is dropped; one already sent commits with its group.
Steps are sent in the order of their keys (stream ids), so that groups of several processes
take their rows' locks in one order; PostgreSQL breaks the rare cycle left (a group refused as
`DeadlockDetected` is sent again step by step).

A group waits as long as its slowest step: a step that waits on a lock (its stream written by a
transaction still open) holds up the steps grouped with it. So a transaction that has written a
stream must not wait, while open, for writes made on their own (an append without
`connection=`): pass it the connection instead.
"""

from __future__ import annotations

import asyncio
import contextvars
import re
from dataclasses import dataclass
from typing import Any

import asyncpg

from ..errors import DatabaseUnavailable
from ..log import get_logger
from . import group_sizes
from .db import Database

__all__ = ["GroupedCalls"]

log = get_logger(__name__)

# Measured with the tool-ledger benchmark (8 callers, 2 cores shared with the server): groups
# of at most 4 steps, 4 in flight, kept client and server busy at once; one large group at a
# time left each waiting for the other.
MOST_STEPS = 4
IN_FLIGHT = 4
HELD_GROUPS = 16

_PARAMETER = re.compile(r"\$(\d+)")


@dataclass(frozen=True, slots=True)
class _Step:
    key: str
    arguments: tuple[Any, ...]
    result: asyncio.Future[Any]


class GroupedCalls:
    """Calls of one database function (`call`: the call with its parameters numbered from $1,
    for example `"signoff_append($1, $2)"`), each committed, concurrent ones in one statement.

    At most `in_flight` groups are sent at once (and at most half the pool's connections), each
    of at most `most` steps. A sender keeps its connection for the groups that follow while
    steps keep coming, up to `HELD_GROUPS`, then lets other waiters for the pool have it."""

    def __init__(
        self, db: Database, call: str, *, most: int = MOST_STEPS, in_flight: int = IN_FLIGHT
    ) -> None:
        self.db = db
        self.call_text = call
        self.arity = max(int(n) for n in _PARAMETER.findall(call))
        self.most = most
        self.in_flight = max(1, min(in_flight, db.pool.get_max_size() // 2))
        self._queue: list[_Step] = []
        self._sending = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._statements: dict[int, str] = {}

    async def call(self, key: str, arguments: tuple[Any, ...]) -> Any:
        """The function's result for `arguments`, once committed (`key`: the stream written).

        Raises:
            Whatever the statement raises for this step alone (typed by `Database`), or
            DatabaseUnavailable when the connection failed under its group.
        """
        if len(arguments) != self.arity:
            raise TypeError(f"{self.call_text} takes {self.arity} arguments, not {len(arguments)}")
        step = _Step(key, arguments, asyncio.get_running_loop().create_future())
        if self._sending == 0:  # nothing in flight: the caller sends its own step, at once
            self._sending += 1
            try:
                await self._send_alone(step)
            finally:
                self._sending -= 1
                if self._queue and self._sending < self.in_flight:  # came meanwhile
                    self._start_sender()
            return step.result.result()
        self._queue.append(step)
        if self._sending < self.in_flight:
            self._start_sender()
        return await step.result

    def _start_sender(self) -> None:
        self._sending += 1
        # A context of its own: it sends other callers' steps, not the trace of the one that
        # started it.
        task = asyncio.get_running_loop().create_task(
            self._drain(), name="signoff-group-commit", context=contextvars.Context()
        )
        self._tasks.add(task)
        task.add_done_callback(self._sender_done)

    def _sender_done(self, task: asyncio.Task[None]) -> None:
        """Counted here, not in `_drain`, which a task cancelled before it started never runs."""
        self._tasks.discard(task)
        self._sending -= 1
        if not self._queue or self._sending > 0:
            return
        if task.cancelled():  # the loop is closing: the steps queued behind it go nowhere
            for step in self._queue:
                step.result.cancel()
            self._queue.clear()
        else:  # steps queued after it found the queue empty, before this callback ran
            self._start_sender()

    async def _send_alone(self, step: _Step) -> None:
        try:
            async with self.db.connection() as conn:
                await self._send(conn, [step])
        except Exception as e:  # no connection came (unavailable, a lost history), or lost
            _settle([step], error=e)

    def _take(self) -> list[_Step]:
        """The next group: the oldest steps, in the order of their keys (`_send` drops those
        whose callers have gone)."""
        taken = self._queue[: self.most]
        del self._queue[: self.most]
        return sorted(taken, key=lambda s: s.key)

    async def _drain(self) -> None:
        group = self._take()
        try:
            while group:
                try:
                    async with self.db.connection() as conn:
                        for _ in range(HELD_GROUPS):
                            await self._send(conn, group)
                            if not (group := self._take()):
                                break
                except Exception as e:  # no connection came (unavailable, a lost history),
                    _settle(group, error=e)  # or it was lost: the callers get the error
                    group = []
                # Steps that came while the connection went back, or past HELD_GROUPS.
                group = group or self._take()
        finally:
            for step in group:  # this sender was cancelled: so are the steps it held
                step.result.cancel()

    async def _send(self, conn: asyncpg.Connection, group: list[_Step]) -> None:
        """Send `group` on `conn` and settle each of its steps (DatabaseUnavailable, after
        settling them, is raised on: the connection is gone)."""
        group = [s for s in group if not s.result.done()]  # callers gone while it waited
        if not group:
            return
        group_sizes.sent(len(group))
        try:
            async with self.db.connection(conn) as typed:  # the driver's errors, typed
                row = await typed.fetchrow(
                    self._statement(len(group)), *(a for s in group for a in s.arguments)
                )
        except DatabaseUnavailable as e:  # committed or not: nobody can tell
            _settle(group, error=e)
            raise
        except Exception as e:
            if len(group) == 1 or not _refused(e):
                _settle(group, error=e)
                return
            log.info(
                "group refused; sending its steps alone",
                steps=len(group),
                error_type=type(e).__name__,
            )
            for step in group:
                await self._send(conn, [step])
        else:
            assert row is not None
            for step, value in zip(group, row.values(), strict=True):
                _settle([step], value=value)

    def _statement(self, steps: int) -> str:
        statement = self._statements.get(steps)
        if statement is None:
            calls = (_renumbered(self.call_text, self.arity * k) for k in range(steps))
            statement = self._statements[steps] = "SELECT " + ", ".join(calls)
        return statement


def _refused(error: Exception) -> bool:
    """Whether nothing of a statement was written: it carries a SQLSTATE (the server refused it,
    or the driver could not encode its arguments), the connection being fine. Any other error
    may come after the commit (decoding the result, a client timeout)."""
    return bool(getattr(error, "sqlstate", None))


def _renumbered(call: str, offset: int) -> str:
    return _PARAMETER.sub(lambda m: f"${int(m[1]) + offset}", call)


def _settle(group: list[_Step], *, value: Any = None, error: BaseException | None = None) -> None:
    for step in group:
        if step.result.done():  # its caller was cancelled meanwhile
            continue
        if error is None:
            step.result.set_result(value)
        else:
            step.result.set_exception(error)
