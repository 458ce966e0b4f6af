"""Schema migrations as a program runs them (`signoff db upgrade`, `db downgrade`, the demo),
with typed errors.

Alembic runs in this process and connects through SQLAlchemy, so a server that is down, a
missing database or a statement that fails would surface as raw driver and SQLAlchemy
exceptions. A probe connection first turns the common cases into `DatabaseUnavailable`; what
fails later is translated here, at one boundary.

The probe also refuses a pooler that hands server sessions between clients, as
`Database.connect` does (`ledger.store.pooling`): alembic's advisory lock is held by a session,
across the transactions of a migration, and one that moves to another client mid-way would
leave the lock there, or release another's. `Settings.pooler_check` off skips that check here
too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import asyncpg
from alembic import command
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy.exc import DBAPIError

from ..errors import DatabaseUnavailable, SignoffError, translate
from . import migrate
from .config import masked
from .db import open_raw_connection, revision_on
from .pooling import require_session_pooling

if TYPE_CHECKING:
    from .settings import Settings

__all__ = ["MigrationFailed", "migrate_database", "schema_revision", "steps_between"]


class MigrationFailed(SignoffError):
    """A migration could not be applied; alembic rolled back the step that failed."""


def migrate_database(
    url: str,
    revision: str,
    *,
    down: bool = False,
    on_step: Callable[[], None] | None = None,
    settings: Settings | None = None,
) -> None:
    """`alembic upgrade` (or `downgrade`) to `revision`; `on_step` after each step applied.
    `settings` as for `schema_revision` (and each host of a multi-host URL within its
    `host_connect_seconds`).

    Raises:
        PoolerModeUnsupported: `url` leads through a pooler in transaction or statement mode.
        DatabaseUnavailable: the server is down, the database missing, or the connection lost.
        MigrationFailed: an unknown revision, or a statement of a migration failed.
    """
    # The typed errors of connecting, and the pooler's check, before alembic's.
    settings = _settings(url, settings)
    asyncio.run(schema_revision(url, settings=settings))
    config = migrate.alembic_config(url)
    config.attributes["signoff_host_seconds"] = settings.host_connect_seconds
    if on_step is not None:
        config.attributes["on_version_apply"] = lambda **_: on_step()
    try:
        (command.downgrade if down else command.upgrade)(config, revision)
    except CommandError as e:  # an unknown revision and the like
        raise MigrationFailed(f"cannot migrate to {revision!r}: {e}") from e
    except (OSError, TimeoutError) as e:
        raise DatabaseUnavailable(masked(url), str(e) or type(e).__name__) from e
    except DBAPIError as e:
        raise _translated(url, revision, e.orig, e) from e
    except asyncpg.PostgresError as e:
        raise _translated(url, revision, e, e) from e


def _translated(url: str, revision: str, error: Any, raised: Exception) -> SignoffError:
    cause = getattr(error, "__cause__", None) or error
    # Lost or refused, by the registry's rule (SQLSTATE 08, 57P01-57P03, sockets, closed).
    closed = isinstance(cause, asyncpg.InterfaceError)
    if isinstance(translate(cause, connection_closed=closed), DatabaseUnavailable):
        return DatabaseUnavailable(masked(url), str(cause) or type(cause).__name__)
    if isinstance(raised, DBAPIError) and raised.connection_invalidated:
        return DatabaseUnavailable(masked(url), str(cause) or type(cause).__name__)
    if isinstance(cause, asyncpg.InvalidCatalogNameError):  # the database was dropped
        return DatabaseUnavailable(masked(url), str(cause))
    sqlstate = getattr(cause, "sqlstate", None)
    first = str(cause).splitlines()[0] if str(cause) else type(cause).__name__
    where = f" (SQLSTATE {sqlstate})" if sqlstate else ""
    return MigrationFailed(
        f"migrating to {revision!r} failed, nothing of that step kept: {first}{where}"
    )


def _settings(url: str, settings: Settings | None) -> Settings:
    """`settings`, else the environment's for `url` (as `Database.connect` takes them)."""
    if settings is not None:
        return settings
    from .settings import Settings  # imported late: settings import the key modules

    return Settings.from_env(database_url=url)


async def schema_revision(url: str, *, settings: Settings | None = None) -> str | None:
    """The database's alembic revision (None: not migrated), with typed connection errors,
    once the connection is known not to go through a pooler that shares server sessions
    (unless `settings.pooler_check` is off; `settings` default: the environment's).

    Raises:
        PoolerModeUnsupported: `url` leads through a pooler in transaction or statement mode.
        DatabaseUnavailable: the server is down, refuses us, or the pooler gave no session.
    """
    settings = _settings(url, settings)
    # Uncached, as the check needs (see `Database.connect`).
    uncached = partial(
        open_raw_connection,
        url,
        statement_cache_size=0,
        host_seconds=settings.host_connect_seconds,
    )
    conn = await uncached()
    try:
        await require_session_pooling(conn, masked(url), uncached, enabled=settings.pooler_check)
        return await revision_on(conn)
    except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as e:  # lost, refused
        if (typed := translate(e, target=masked(url), connection_closed=conn.is_closed())) is None:
            raise
        raise typed from e
    finally:
        await conn.close()


def steps_between(current: str | None, target: str, *, down: bool = False) -> int | None:
    """How many migrations lie between `current` and `target` (None when alembic cannot say,
    e.g. for a relative target)."""
    script = ScriptDirectory.from_config(migrate.alembic_config(""))
    upper, lower = (current or "base", target) if down else (target, current or "base")
    try:
        return len(list(script.iterate_revisions(upper, lower)))
    except Exception:  # a relative or unknown revision: the bar shows counts without a total
        return None
