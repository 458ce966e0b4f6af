"""Health checks: whether a Signoff process can do its work on this database now.

Each check has a name, a status, a one-line detail and a one-line remedy (what to do when it
fails). `signoff serve` answers `/readyz` from them (names and statuses only: that endpoint is
unauthenticated) and `signoff doctor` prints them. A check never raises: what goes wrong is its
result.

| name           | fails when                                                              |
|----------------|-------------------------------------------------------------------------|
| `database`     | `SELECT 1` does not answer within `DATABASE_SECONDS`                    |
| `schema`       | the database's alembic revision is not this code's head                 |
| `keys`         | no KEK, the wrong KEK, or a purpose without an active key that opens    |
| `horizon`      | one transaction has held back the global order past a limit             |
| `nonce_budget` | never: it warns when an active sealing key has used half its budget     |

When the database does not answer, or has no schema, the checks after it are not run (they
would fail the same way, each after its own timeout) and fail as "not checked"; so do the nonce
budgets, which only warn, warn so when the keys could not be loaded.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum

from .errors import ConfigurationError, KekMismatch, KekMissing, SignoffError
from .journal.horizon import read_horizon
from .keys import KeyRing, KeyState, Purpose
from .store import Database, migrate
from .store.db import revision_on
from .store.settings import Settings

__all__ = [
    "CHECKS",
    "CHECK_SECONDS",
    "DATABASE_SECONDS",
    "NONCE_WARN_USED",
    "Check",
    "Health",
    "Status",
    "check_all",
    "check_database",
    "check_horizon",
    "check_keys",
    "check_nonces",
    "check_schema",
    "diagnose",
]

DATABASE_SECONDS = 2.0
"""How long `SELECT 1` may take before the database counts as not answering."""
CHECK_SECONDS = 5.0
"""How long any other check may take (connecting, for `diagnose`, included)."""
NONCE_WARN_USED = 0.5
"""The share of its nonce budget an active sealing key may use before the check warns (when
processes log that it should be rotated soon)."""

DATABASE, SCHEMA, KEYS, HORIZON, NONCE_BUDGET = (
    "database",
    "schema",
    "keys",
    "horizon",
    "nonce_budget",
)
CHECKS = (DATABASE, SCHEMA, KEYS, HORIZON, NONCE_BUDGET)
"""Every check's name, in the order they run."""

_REMEDIES = {
    DATABASE: "check that PostgreSQL runs and that this URL and login may connect "
    "(SIGNOFF_DATABASE_URL or --database-url)",
    SCHEMA: "run `signoff db upgrade` as the database's owner",
    KEYS: "as the owner or a key administrator, run `signoff keys init` (the decision key "
    "needs SIGNOFF_REVIEWER_KEK_FILE too)",
    HORIZON: "end the transaction: find it with `SELECT pid, usename, xact_start FROM "
    "pg_stat_activity WHERE backend_xid IS NOT NULL ORDER BY xact_start`, then "
    "`SELECT pg_terminate_backend(pid)`",
    NONCE_BUDGET: "rotate it soon: `signoff keys rotate PURPOSE` as the owner or a key "
    "administrator (past three quarters a process whose login may rotate does it)",
}
_KEK_REMEDY = (
    "set SIGNOFF_KEK_FILE (or SIGNOFF_KEK) to the KEK that wraps the data keys; "
    "`signoff keys new-kek --out FILE` makes one for a database without keys"
)
_REFUSED_REMEDY = (
    "a data_keys row was changed: run `signoff ledger verify`, then `signoff keys rotate "
    "PURPOSE` as the owner or a key administrator"
)
_NOT_MIGRATED = "not migrated"
_NOT_CHECKED = "make the check it depends on pass first"
_SLOW = "the database answers too slowly: look for load or locks in pg_stat_activity"
_BROKEN = "the check itself could not run: the detail says why"


class Status(StrEnum):
    OK = "ok"
    WARN = "warn"  # works now; act before it does not
    FAIL = "fail"


@dataclass(frozen=True, slots=True)
class Check:
    """One check's result. `remedy` says what to do when it fails (or warns)."""

    name: str
    status: Status
    detail: str
    remedy: str

    @property
    def failed(self) -> bool:
        return self.status is Status.FAIL


@dataclass(frozen=True, slots=True)
class Health:
    """Every check's result, in `CHECKS` order."""

    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        """Whether no check failed (a warning passes)."""
        return not any(c.failed for c in self.checks)

    @property
    def failed(self) -> list[str]:
        return [c.name for c in self.checks if c.failed]


def _check(name: str, status: Status, detail: str, remedy: str | None = None) -> Check:
    return Check(name, status, " ".join(detail.split()), remedy or _REMEDIES[name])


def _error_detail(error: BaseException) -> str:
    """One line for an error: Signoff's own say what happened; others are named by type."""
    text = " ".join(str(error).split())
    if isinstance(error, SignoffError):
        return text
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _not_checked(name: str, why: str) -> Check:
    status = Status.WARN if name == NONCE_BUDGET else Status.FAIL  # it only ever warns
    return _check(name, status, f"not checked: {why}", _NOT_CHECKED)


def _database_down(detail: str) -> Health:
    rest = (_not_checked(n, "the database does not answer") for n in CHECKS[1:])
    return Health((_check(DATABASE, Status.FAIL, detail), *rest))


async def _bounded(name: str, check: Callable[[], Awaitable[Check]]) -> Check:
    """`check()` within `CHECK_SECONDS`; a timeout or an error is its failure."""
    try:
        async with asyncio.timeout(CHECK_SECONDS):
            return await check()
    except TimeoutError:
        return _check(name, Status.FAIL, f"no answer within {CHECK_SECONDS:g} s", _SLOW)
    except Exception as e:  # whatever failed, the check failed: say what, never raise
        return _check(name, Status.FAIL, _error_detail(e), _BROKEN)


async def check_database(db: Database, seconds: float = DATABASE_SECONDS) -> Check:
    started = time.perf_counter()
    try:
        async with asyncio.timeout(seconds):
            async with db.connection() as conn:
                await conn.fetchval("SELECT 1")
    except TimeoutError:
        return _check(DATABASE, Status.FAIL, f"no answer within {seconds:g} s")
    except Exception as e:  # refused, lost, anything: the database does not answer
        return _check(DATABASE, Status.FAIL, _error_detail(e))
    return _check(
        DATABASE, Status.OK, f"answers in {(time.perf_counter() - started) * 1000:.0f} ms"
    )


async def check_schema(db: Database) -> Check:
    head = migrate.head_revision()
    async with db.connection() as conn:
        current = await revision_on(conn)
    if current == head:
        return _check(SCHEMA, Status.OK, f"at head, revision {head}")
    if current is None:
        return _check(SCHEMA, Status.FAIL, f"{_NOT_MIGRATED}; this code needs revision {head}")
    if current in migrate.PRE_RELEASE_REVISIONS:
        return _check(
            SCHEMA,
            Status.FAIL,
            f"at revision {current}, made by a pre-release Signoff",
            "recreate the database, then run `signoff db upgrade`",
        )
    if not migrate.is_known_revision(current):
        return _check(
            SCHEMA,
            Status.FAIL,
            f"at revision {current}, which this code does not know (it needs {head})",
            "a newer Signoff migrated it: run that version here too",
        )
    return _check(SCHEMA, Status.FAIL, f"at revision {current}; this code needs {head}")


def _keys_refused(error: Exception) -> Check:
    """The keys check when the key ring could not be opened or refreshed."""
    if isinstance(error, TimeoutError):
        return _check(KEYS, Status.FAIL, f"no answer within {CHECK_SECONDS:g} s", _SLOW)
    if isinstance(error, KekMissing):
        needed = "" if error.needed.startswith("(") else f"; the data keys need KEK {error.needed}"
        return _check(KEYS, Status.FAIL, f"no KEK configured{needed}", _KEK_REMEDY)
    if isinstance(error, KekMismatch):
        return _check(
            KEYS,
            Status.FAIL,
            f"the data keys are wrapped by KEK {error.needed}, the configured KEK is "
            f"{error.configured}",
            f"point SIGNOFF_KEK_FILE (or SIGNOFF_KEK) at KEK {error.needed}",
        )
    return _check(KEYS, Status.FAIL, _error_detail(error), _BROKEN)


def check_keys(ring: KeyRing) -> Check:
    """Whether `ring` holds every purpose's active key, unwrapped under its KEK."""
    if ring.kek is None:
        return _check(KEYS, Status.FAIL, "no KEK configured and no data keys yet", _KEK_REMEDY)
    unusable = ring.unusable_active()
    if unusable:
        missing = any(k.startswith("no active") for k in unusable.values())
        detail = "; ".join(unusable.values())
        return _check(KEYS, Status.FAIL, detail, None if missing else _REFUSED_REMEDY)
    signs = "" if ring.can_sign_decisions else "; decisions verified only (no reviewer KEK)"
    return _check(
        KEYS, Status.OK, f"{len(Purpose)} active keys open under KEK {ring.kek.kek_id}{signs}"
    )


def check_nonces(ring: KeyRing) -> Check:
    """Warns when an active sealing key has used `NONCE_WARN_USED` of its nonce budget."""
    budget = ring.nonces.budget
    worn = [
        f"{k.purpose} key {k.key_id} has used {k.sealed / budget:.0%} of its nonce budget"
        for k in ring.all_keys()
        if k.state is KeyState.ACTIVE
        and k.purpose in (Purpose.CHECKPOINT, Purpose.RESULT)
        and k.sealed >= budget * NONCE_WARN_USED
    ]
    if worn:
        return _check(NONCE_BUDGET, Status.WARN, "; ".join(worn))
    return _check(
        NONCE_BUDGET,
        Status.OK,
        f"no active sealing key has used {NONCE_WARN_USED:.0%} of its budget",
    )


def check_horizon(held: bool, lag_seconds: float, events_behind: int, settings: Settings) -> Check:
    """Whether the journal's horizon has been held back for less than the settings allow: a
    failure past `horizon_ready_seconds` when it is set, else a warning past
    `horizon_warn_seconds` (any login may hold the horizon: see `Settings`)."""
    if not held:
        return _check(HORIZON, Status.OK, "no open transaction holds it")
    limit = settings.horizon_ready_seconds
    over = Status.FAIL
    if limit is None:
        limit, over = settings.horizon_warn_seconds, Status.WARN
    return _check(
        HORIZON,
        over if lag_seconds >= limit else Status.OK,
        f"held for {lag_seconds:.0f} s by an open transaction (limit {limit:g} s), "
        f"{events_behind} event(s) waiting behind it",
    )


async def check_all(
    db: Database,
    *,
    ring: Callable[[], Awaitable[KeyRing]],
    horizon: Callable[[], Awaitable[Check]],
) -> Health:
    """Run every check on `db`: `ring` opens (or refreshes) the key ring to check, `horizon`
    checks the horizon as the caller measures it."""
    database = await check_database(db)
    if database.failed:
        return _database_down(database.detail)
    schema = await _bounded(SCHEMA, lambda: check_schema(db))
    if schema.detail.startswith(_NOT_MIGRATED):  # no tables: nothing else can be checked
        rest = (_not_checked(n, "the database has no schema") for n in CHECKS[2:])
        return Health((database, schema, *rest))
    try:
        async with asyncio.timeout(CHECK_SECONDS):
            opened = await ring()
    except Exception as e:  # no KEK, the wrong one, a row refused: the check says which
        keys = _keys_refused(e)
        nonces = _not_checked(NONCE_BUDGET, "the keys are not loaded")
    else:
        keys, nonces = check_keys(opened), check_nonces(opened)
    held = await _bounded(HORIZON, horizon)
    return Health((database, schema, keys, held, nonces))


async def diagnose(settings: Settings) -> Health:
    """Every check against the settings' database, with their KEKs, on a pool of its own (what
    `signoff doctor` runs). The schema may be at any revision: that is a check too.

    Raises:
        ConfigurationError: a malformed database URL.
    """
    try:
        url = await asyncio.to_thread(settings.resolve_url)
        async with asyncio.timeout(CHECK_SECONDS):
            db = await Database.connect(url, settings=settings, pool_size=2, check_schema=False)
    except ConfigurationError:
        raise
    except TimeoutError:
        return _database_down(f"no connection within {CHECK_SECONDS:g} s")
    except (SignoffError, OSError) as e:  # down, missing, refused; an embedded server that fails
        return _database_down(_error_detail(e))

    async def look() -> Check:
        async with db.connection() as conn:
            reading = await read_horizon(conn)
        return check_horizon(reading.held, reading.lag_seconds, reading.events_behind, settings)

    try:
        return await check_all(
            db, ring=lambda: KeyRing.open(db, create_missing=False), horizon=look
        )
    finally:
        await db.close()
