"""Reading from a hot standby: the database auditors read from (`Settings.read_database_url`,
`SIGNOFF_READ_DATABASE_URL`), opened read-only, and how far behind its primary it is.

A standby holds what it has replayed of the primary's WAL, so whatever is read there (an
export, a verification, a proof) covers the journal up to its replay point. How far behind
that is, is measured on the standby and, when the primary is known, against it:

- on the standby, `pg_last_wal_replay_lsn()` (how far it has replayed) and
  `pg_last_xact_replay_timestamp()` (the commit time, by the primary's clock, of the last
  transaction it replayed);
- on the primary, `pg_current_wal_lsn()`, read after the standby's position, so the
  difference never understates: no bytes behind means caught up (0 s behind).

Behind by some bytes, or with no primary to compare with, the time since the last replayed
commit is what is known: an upper bound (the standby holds everything committed before it),
which an idle primary makes look large, since nothing new is committed to replay (and which
is as right as the two servers' clocks agree). A database that is not in recovery is no
standby: its reads are current (0 s behind).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import asyncpg

from ..errors import ConfigurationError
from .config import host_urls, masked
from .db import Database, connect_each_host

if TYPE_CHECKING:
    from .settings import Settings

__all__ = ["StandbyLag", "open_standby", "seconds_or_nan", "standby_lag"]

# A primary that does not answer within this (per host of a multi-host URL) is reported, not
# awaited.
_PRIMARY_SECONDS = 5.0

_STANDBY = """
SELECT pg_is_in_recovery() AS standby,
       pg_last_wal_replay_lsn()::text AS replay_lsn,
       pg_last_xact_replay_timestamp() AS replayed_at,
       now() AS now
"""
_PRIMARY = "SELECT pg_current_wal_lsn()::text"


def _lsn(text: str) -> int:
    """A WAL position (`16/B374D848`) as a number of bytes."""
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) + int(low, 16)


@dataclass(frozen=True, slots=True)
class StandbyLag:
    """How far behind its primary a standby was when measured.

    `seconds_behind` is 0 when the database is no standby or has replayed all the primary's
    WAL, else the time since its last replayed commit (an upper bound; None before it has
    replayed any); `bytes_behind` is None when the primary's position is unknown
    (`primary_problem` says why, when it was asked and did not answer).
    """

    standby: bool
    measured_at: datetime
    replay_lsn: str | None = None
    replayed_at: datetime | None = None
    primary_lsn: str | None = None
    bytes_behind: int | None = None
    seconds_behind: float | None = None
    primary_problem: str | None = None

    @property
    def caught_up(self) -> bool:
        """No standby, or one that had replayed all the primary's WAL."""
        return not self.standby or self.bytes_behind == 0

    def line(self) -> str:
        """One line for a person (a command prints it on stderr)."""
        if not self.standby:
            return "standby: not a standby (not in recovery): reads are current, 0 s behind"
        if self.replayed_at is None:
            upto = "standby: replayed no commit since it started"
        else:
            upto = f"standby: replayed up to {self.replayed_at.isoformat()}"
        if self.caught_up:
            return f"{upto}, 0 s behind (caught up with the primary's WAL at {self.primary_lsn})"
        if self.seconds_behind is None:
            behind = "how far behind is unknown"
        else:
            behind = f"at most {self.seconds_behind:.1f} s behind"
        if self.bytes_behind is not None:
            return f"{upto}, {behind} ({self.bytes_behind} bytes of WAL behind the primary)"
        why = "is not known" if self.primary_problem is None else self.primary_problem
        return (
            f"{upto}, {behind} (the primary {why}; measured from the last replayed commit, so "
            "an idle primary looks behind too)"
        )

    def to_dict(self) -> dict[str, Any]:
        """The measure as JSON values (times in ISO 8601)."""
        return {
            "standby": self.standby,
            "measured_at": self.measured_at.isoformat(),
            "replay_lsn": self.replay_lsn,
            "replayed_at": None if self.replayed_at is None else self.replayed_at.isoformat(),
            "primary_lsn": self.primary_lsn,
            "bytes_behind": self.bytes_behind,
            "seconds_behind": self.seconds_behind,
            "primary_problem": self.primary_problem,
            "line": self.line(),
        }


async def open_standby(settings: Settings, **options: Any) -> Database:
    """A read-only `Database` on `settings.read_database_url` (its other settings kept), for
    reads only: a write through it raises `ReadOnlyDatabase`, on a standby or a primary.

    Raises:
        ConfigurationError: no read database is configured.
        DatabaseUnavailable, SchemaOutOfDate: as `Database.connect`.
    """
    if settings.read_database_url is None:
        raise ConfigurationError("no read database: set SIGNOFF_READ_DATABASE_URL")
    return await Database.connect(
        settings.read_database_url, settings=settings, read_only=True, **options
    )


async def standby_lag(reader: Database, primary: Database | str | None = None) -> StandbyLag:
    """How far behind `reader` (a standby, or any database) is; compared with `primary` (its
    pool, or a URL; None: unknown) when it answers within a few seconds.

    Raises:
        DatabaseUnavailable: `reader` does not answer (a primary that does not is reported in
            `primary_problem` instead).
    """
    async with reader.connection() as conn:
        row = await conn.fetchrow(_STANDBY)
    now: datetime = row["now"]
    if not row["standby"]:
        return StandbyLag(standby=False, measured_at=now, seconds_behind=0.0)
    replay_lsn: str | None = row["replay_lsn"]
    replayed_at: datetime | None = row["replayed_at"]
    since = None if replayed_at is None else max(0.0, (now - replayed_at).total_seconds())
    primary_lsn, problem = (None, None) if primary is None else await _primary_lsn(primary)
    behind = None
    if primary_lsn is not None and replay_lsn is not None:
        behind = max(0, _lsn(primary_lsn) - _lsn(replay_lsn))
    return StandbyLag(
        standby=True,
        measured_at=now,
        replay_lsn=replay_lsn,
        replayed_at=replayed_at,
        primary_lsn=primary_lsn,
        bytes_behind=behind,
        seconds_behind=0.0 if behind == 0 else since,
        primary_problem=problem,
    )


async def _primary_lsn(primary: Database | str) -> tuple[str | None, str | None]:
    """The primary's current WAL position, or None and why it is not known."""
    # Bounded as a whole: waiting for a pool slot or a connection counts too; a URL's hosts are
    # tried in turn, each within the bound.
    hosts = 1 if isinstance(primary, Database) else len(host_urls(primary))
    try:
        async with asyncio.timeout(_PRIMARY_SECONDS * hosts), _connected(primary) as conn:
            lsn: str = await conn.fetchval(_PRIMARY)
    except asyncpg.ObjectNotInPrerequisiteStateError:  # "recovery is in progress"
        return None, "is itself a standby"
    except Exception as e:  # unreachable, refusing, too slow: the standby's own measure stands
        url = primary.url if isinstance(primary, Database) else primary
        return None, f"did not answer at {masked(url)} ({type(e).__name__})"
    return lsn, None


@asynccontextmanager
async def _connected(primary: Database | str) -> AsyncIterator[asyncpg.Connection]:
    if isinstance(primary, Database):
        async with primary.connection() as conn:
            yield conn
        return
    conn = await connect_each_host(primary, host_seconds=_PRIMARY_SECONDS, timeout=_PRIMARY_SECONDS)
    try:
        yield conn
    finally:
        await conn.close()


def seconds_or_nan(lag: StandbyLag) -> float:
    """`seconds_behind` for a gauge: NaN when unknown."""
    return math.nan if lag.seconds_behind is None else lag.seconds_behind
