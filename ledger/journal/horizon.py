"""The journal's horizon as one look sees it: the global order reaches only below the oldest
transaction still running (`pg_snapshot_xmin`), so one transaction that holds a transaction id
and stays open holds back every event committed after it from the readers of the global order
(event streams, webhooks, exports, digests) until it ends.

`signoff serve` looks every few seconds and measures how long the horizon stands still
(`adapters.http.horizon`); `signoff doctor` looks once (`ledger.health`), and takes how long
the horizon has been held from what the database shows: the age of the holding transaction when
this login may see it in `pg_stat_activity` (the owner, `pg_read_all_stats`), else how long the
oldest event behind it has waited.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from . import _sql as sql

__all__ = ["HorizonReading", "read_horizon"]


@dataclass(frozen=True, slots=True)
class HorizonReading:
    xmin: int
    xmax: int
    events_behind: int
    waited: float | None  # seconds the oldest event behind the horizon has waited (None: none)
    seen_age: float | None  # the holding transaction's age, when this login may see it

    @property
    def held(self) -> bool:
        """Whether a transaction that holds an id is running."""
        return self.xmin < self.xmax

    @property
    def lag_seconds(self) -> float:
        """How long the horizon has held back the global order, as far as this look can tell."""
        if not self.held:
            return 0.0
        return max(self.seen_age or 0.0, self.waited or 0.0)


async def read_horizon(conn: asyncpg.Connection) -> HorizonReading:
    """The horizon now, on `conn` (any login that reads `events`)."""
    row = await conn.fetchrow(sql.HORIZON)
    return HorizonReading(
        xmin=int(row["xmin"]),
        xmax=int(row["xmax"]),
        events_behind=int(row["behind"]),
        waited=row["waited"],
        seen_age=row["seen_age"],
    )
