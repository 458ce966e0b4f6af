"""Database access: one SQLAlchemy async engine on asyncpg, shared by everything.

Queries that are not on a hot path use SQLAlchemy Core through `engine`. Hot paths (journal
appends, the tool-call ledger) borrow the pooled asyncpg connection itself via `connection()`:
the same pool, without SQLAlchemy's per-statement overhead.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import asyncpg
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from . import migrate
from .config import masked, resolve_url
from .errors import ConfigurationError, DatabaseUnavailable, SchemaOutOfDate
from .log import get_logger

__all__ = ["Database", "open_raw_connection"]

log = get_logger(__name__)

_CONNECTION_LOST = (
    asyncpg.InterfaceError,  # includes "connection is closed" / ConnectionDoesNotExistError
    asyncpg.PostgresConnectionError,
    asyncpg.AdminShutdownError,
    asyncpg.CannotConnectNowError,
    ConnectionError,
)


async def open_raw_connection(url: str) -> asyncpg.Connection:
    """A dedicated asyncpg connection (for LISTEN and the like), with errors translated."""
    try:
        return await asyncpg.connect(url)
    except (TimeoutError, OSError) as e:
        raise DatabaseUnavailable(masked(url), str(e) or type(e).__name__) from e
    except asyncpg.PostgresError as e:  # unknown database, bad credentials, too many clients
        raise DatabaseUnavailable(masked(url), f"{e} (SQLSTATE {e.sqlstate})") from e
    except ValueError as e:  # asyncpg's DSN parser
        raise ConfigurationError(f"malformed database URL {masked(url)!r}: {e}") from e


class Database:
    """A connection pool to the Signoff database.

    Use `await Database.connect(url)` or `await Database.from_env()`; `await db.close()` at the end
    (or `async with`).
    """

    def __init__(self, url: str, engine: AsyncEngine) -> None:
        self.url = url
        self.engine = engine

    @classmethod
    async def connect(cls, url: str, *, pool_size: int = 10, check_schema: bool = True) -> Database:
        """Open a pool to `url` (a plain `postgresql://` URL).

        Raises:
            ConfigurationError: the URL is malformed.
            DatabaseUnavailable: the server is down or refuses us.
            SchemaOutOfDate: the schema is not at this code's revision (`check_schema`).
        """
        # Fail fast with a clear error before the pool hides the cause in its own wrappers.
        probe = await open_raw_connection(url)
        try:
            current = await _schema_revision(probe) if check_schema else None
        finally:
            await probe.close()
        if check_schema:
            expected = migrate.head_revision()
            if current != expected:
                raise SchemaOutOfDate(current, expected)
        engine = create_async_engine(
            "postgresql+asyncpg://",
            async_creator=partial(asyncpg.connect, url),
            pool_size=pool_size,
            max_overflow=0,
            pool_recycle=3600,
        )
        log.debug("database pool opened", url=masked(url), pool_size=pool_size)
        return cls(url, engine)

    @classmethod
    async def from_env(cls, **options: Any) -> Database:
        """Connect to `SIGNOFF_DATABASE_URL` / `DATABASE_URL`, else to the embedded server."""
        url = await asyncio.to_thread(resolve_url)
        return await cls.connect(url, **options)

    @asynccontextmanager
    async def connection(
        self, existing: asyncpg.Connection | None = None
    ) -> AsyncIterator[asyncpg.Connection]:
        """Borrow a pooled asyncpg connection (autocommit unless you open a transaction).

        With `existing` (a caller's connection, perhaps in its own transaction), use that one.
        """
        if existing is not None:
            yield existing
            return
        try:
            conn = await self.engine.connect().start()
            raw = await conn.get_raw_connection()
        except (*_CONNECTION_LOST, OSError, asyncpg.PostgresError, DBAPIError) as e:
            # Connecting failed: the server is down, starting up or refusing us.
            raise DatabaseUnavailable(masked(self.url), str(e) or type(e).__name__) from e
        try:
            yield raw.driver_connection
        except _CONNECTION_LOST as e:
            # The server restarted or the network dropped: every pooled connection is likely
            # dead, so start a new pool rather than fail once per connection.
            await conn.invalidate(e)
            await self.engine.dispose(close=False)
            raise DatabaseUnavailable(masked(self.url), str(e) or type(e).__name__) from e
        finally:
            await asyncio.shield(conn.close())  # hand the connection back even when cancelled

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[asyncpg.Connection]:
        """Borrow a pooled asyncpg connection inside one transaction, committed on success."""
        async with self.connection() as conn, conn.transaction():
            yield conn

    async def close(self) -> None:
        await self.engine.dispose()

    async def __aenter__(self) -> Database:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def _schema_revision(conn: asyncpg.Connection) -> str | None:
    exists = await conn.fetchval("SELECT to_regclass('alembic_version') IS NOT NULL")
    if not exists:
        return None
    revision: str | None = await conn.fetchval("SELECT version_num FROM alembic_version")
    return revision
