"""What a process saw committed, checked whenever it opens a new database connection.

A failover to a standby that had not received the primary's last commits (asynchronous
replication, or a promotion that ignored the lag) gives clients a database without them, and
nothing in PostgreSQL says so. A Signoff call that was recorded there is then unknown to the
ledger: asked again, it would run again, and an approval it consumed could be consumed again.

A process that had those commits acknowledged knows better: the fence keeps the journal
position and chain hash of the last events its calls committed (the outcome event of each call
it ran, the newest `KEEP`), and every new pooled connection (after a lost connection, every one
is new, and the checkpointer's too) first checks that the database still holds them, hash for
hash. If one is missing or different, the loss is reported to the database (`history_losses`,
`ledger.store.history`: while it is open, no process starts a call, this one or one started
later) and the connection is refused with `HistoryLost`, as is every later use of the database
in this process. WAL is one ordered stream: a server that holds the newest of a process's
acknowledged commits holds every earlier one, so checking the newest few covers all of them;
several are kept because commits of concurrent calls are acknowledged in an order that is not
quite the WAL's.

A process started afterwards has seen nothing and cannot tell by itself: the database's record
of the loss tells it, and a digest taken before shows what is gone (`signoff ledger verify
--digest`). The check costs one query per new connection, none per statement.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import asyncpg

from ..errors import DatabaseUnavailable, HistoryLost
from ..log import get_logger

__all__ = ["HELD", "HELD_PSYCOPG", "IN_RECOVERY", "REPORT", "REPORT_PSYCOPG", "HistoryFence"]

log = get_logger(__name__)

KEEP = 64  # the newest acknowledged events checked on each new connection

# What the server holds of the positions kept: asyncpg's parameters, and psycopg's (the
# LangGraph checkpointer's connections are checked too).
HELD = "SELECT position, encode(hash, 'hex') FROM events WHERE position = ANY($1::bigint[])"
HELD_PSYCOPG = HELD.replace("$1", "%s")
IN_RECOVERY = "SELECT pg_is_in_recovery()"
# The loss, reported (checked by the database against its own events) for every process to
# see: the open loss's id, or NULL when the database recorded nothing new.
REPORT = "SELECT signoff_report_history_lost($1::bigint[], $2::text[])"
REPORT_PSYCOPG = REPORT.replace("$1", "%s").replace("$2", "%s")

Held = Callable[[list[int]], Awaitable[Iterable[Sequence[Any]]]]
Report = Callable[[list[int], list[str]], Awaitable[object]]


class HistoryFence:
    """The newest events this process saw committed; `check` on every new connection."""

    def __init__(self, target: str) -> None:
        self.target = target  # the masked URL, for the error
        self._seen: deque[tuple[int, str]] = deque(maxlen=KEEP)
        self.lost: HistoryLost | None = None  # once found, for good

    def saw(self, position: int, hash_hex: str) -> None:
        """An event of this process's that is committed (its transaction acknowledged)."""
        self._seen.append((position, hash_hex))

    def refuse_if_lost(self) -> None:
        """Raise `HistoryLost` once any connection found the history lost."""
        if self.lost is not None:
            raise self.lost

    async def check(self, conn: asyncpg.Connection) -> None:
        """Raise `HistoryLost` unless `conn`'s database holds every event kept."""

        async def standby() -> bool:
            return bool(await conn.fetchval(IN_RECOVERY))

        async def report(positions: list[int], hashes: list[str]) -> object:
            return await conn.fetchval(REPORT, positions, hashes)

        await self.check_with(lambda positions: conn.fetch(HELD, positions), standby, report)

    async def check_with(
        self, held: Held, standby: Callable[[], Awaitable[bool]], report: Report
    ) -> None:
        """`check`, with `held(positions)` giving the (position, hash hex) rows the server
        holds of them, `standby()` whether it is in recovery and `report(positions, hashes)`
        recording the loss (for another driver's connection).

        Raises:
            HistoryLost: the primary lacks an event kept; from now on, every check raises it.
            DatabaseUnavailable: the connection reached a standby (a multi-host URL without
                `target_session_attrs=read-write`, an endpoint that pointed at a reader during
                a failover), which may only be behind: not a loss, nothing is latched.
        """
        self.refuse_if_lost()
        seen = list(self._seen)
        if not seen:
            return
        found = {row[0]: row[1] for row in await held([p for p, _ in seen])}
        missing = sorted(p for p, h in seen if found.get(p) != h)
        if not missing:
            return
        if await standby():
            raise DatabaseUnavailable(
                self.target, "reached a standby, not the primary (it may only be behind)"
            )
        lost = [(p, h) for p, h in seen if p in set(missing)]
        loss_id: int | None = None
        try:
            answer = await report([p for p, _ in lost], [h for _, h in lost])
        except Exception as e:  # the refusal stands whether or not the report went through
            log.error("history loss not recorded", error_type=type(e).__name__, missing=missing)
        else:
            loss_id = answer if isinstance(answer, int) else None
            log.error("history loss found", loss_id=loss_id, missing=missing)
        self.lost = HistoryLost.seen(self.target, missing, loss_id)
        raise self.lost
