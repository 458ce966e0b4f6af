"""Database access: an asyncpg pool for every statement (SQLAlchemy runs only the migrations).

Every statement Signoff runs goes through `connection()` / `transaction()`: a pooled asyncpg
connection, prepared statements, one round trip each. Measured here, SQLAlchemy's async pool
(its greenlet hop and checkout events) cost about 80 us of client CPU per checkout on 2 cores
shared with the server, a third of a tool call's budget.

A multi-host URL (a failover cluster's) is tried one host at a time, each within the settings'
`host_connect_seconds` (`connect_each_host`): asyncpg bounds the whole list by one timeout, so
a first host that accepts connections and never answers would use it all.

Connections go back to the pool as they are: Signoff keeps no session state on them (advisory
locks are per transaction), so the reset round trip asyncpg would make on every release is
skipped; a connection returned inside a transaction is rolled back.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

import asyncpg

from ..errors import (
    ConfigurationError,
    DatabaseUnavailable,
    SchemaOutOfDate,
    SignoffError,
    translate,
)
from ..log import get_logger
from . import migrate
from .config import HOST_CONNECT_SECONDS, host_urls, masked
from .driver_log import quiet_pool_floor
from .fence import HistoryFence
from .pooling import require_session_pooling

if TYPE_CHECKING:
    from .settings import Settings

__all__ = ["Database", "connect_each_host", "open_raw_connection", "revision_on"]

log = get_logger(__name__)
quiet_pool_floor()


def _closed(conn: asyncpg.Connection) -> bool:
    """Whether `conn` is closed, including taken back by the pool (then even asking raises)."""
    try:
        return bool(conn.is_closed())
    except asyncpg.InterfaceError:  # "released back to the pool": it closed under us
        return True


# No host of a multi-host URL is what `target_session_attrs` asks for: during a failover, the
# standbys answer and none is the primary yet. Unavailable, like a server that is down.
_NO_TARGET = asyncpg.TargetServerAttributeNotMatched
# What asyncpg tries the next host of a multi-host URL after (OSError: timeouts too).
_NEXT_HOST = (OSError, asyncpg.CannotConnectNowError, _NO_TARGET)


async def connect_each_host(
    url: str, *, host_seconds: float = HOST_CONNECT_SECONDS, **options: Any
) -> asyncpg.Connection:
    """`asyncpg.connect(url, **options)`, but the hosts of a multi-host URL one at a time, each
    within `host_seconds`: the first that answers and is what `target_session_attrs` asks for
    wins, as in asyncpg. A URL with one host is asyncpg's alone (with `options`' `timeout`, or
    its own); with several, each host's bound replaces that `timeout` of the whole list.

    Raises:
        OSError: no host answered (the message names each host and why).
        asyncpg.TargetServerAttributeNotMatched: hosts answered, none is what was asked for.
        asyncpg.PostgresError: a host refused us (bad credentials, no such database), as
            asyncpg raises it without trying the next; or the last host cannot take
            connections now (starting up, shutting down), with every host's reason.
    """
    hosts = host_urls(url)
    if len(hosts) == 1:
        return await asyncpg.connect(url, **options)
    options.pop("timeout", None)
    wanted = options.get("target_session_attrs") or _target_of(url)
    if wanted == "prefer-standby":  # asyncpg keeps any host that answered when none is one
        options["target_session_attrs"] = "standby"
    failed: list[tuple[str, str, BaseException]] = []
    for link, name in hosts:
        try:
            return await asyncpg.connect(link, timeout=host_seconds, **options)
        except _NEXT_HOST as e:
            failed.append((link, name, e))
    if wanted == "prefer-standby":
        options["target_session_attrs"] = "any"
        for link, _, error in failed:
            if isinstance(error, _NO_TARGET):
                with contextlib.suppress(*_NEXT_HOST):
                    return await asyncpg.connect(link, timeout=host_seconds, **options)
    raise _none_of(failed, wanted, host_seconds) from failed[-1][2]


def _target_of(url: str) -> str | None:
    query = url.partition("#")[0].partition("?")[2]
    found = [value for key, value in parse_qsl(query) if key == "target_session_attrs"]
    return found[-1] if found else None


def _none_of(
    failed: list[tuple[str, str, BaseException]], wanted: str | None, seconds: float
) -> Exception:
    """One error for every host tried, of the last one's kind (a server's keeps its SQLSTATE),
    with every host's reason on one line."""

    def why(error: BaseException) -> str:
        if isinstance(error, TimeoutError):
            return f"no answer within {seconds:g} s"
        if isinstance(error, _NO_TARGET):
            return f"not what target_session_attrs={wanted} asks for"
        return " ".join((str(error) or type(error).__name__).split())

    reasons = "; ".join(f"{name}: {why(error)}" for _, name, error in failed)
    last = failed[-1][2]
    message = f"none of {len(failed)} hosts could be used ({reasons})"
    combined: Exception
    if all(isinstance(error, _NO_TARGET) for _, _, error in failed):
        combined = _NO_TARGET(f"no host matches the target attribute {wanted!r} ({reasons})")
    elif isinstance(last, asyncpg.PostgresError):
        combined = type(last)(message)  # its class carries the SQLSTATE
    else:
        combined = ConnectionError(message)
    return combined


async def open_raw_connection(
    url: str, *, statement_cache_size: int = 100, host_seconds: float = HOST_CONNECT_SECONDS
) -> asyncpg.Connection:
    """A dedicated asyncpg connection (for LISTEN and the like), with errors translated;
    `statement_cache_size=0` prepares no named statement (asyncpg's default caches 100);
    `host_seconds`: how long each host of a multi-host URL may take (`connect_each_host`)."""
    try:
        return await connect_each_host(
            url, host_seconds=host_seconds, statement_cache_size=statement_cache_size
        )
    except (TimeoutError, OSError, _NO_TARGET) as e:
        raise DatabaseUnavailable(masked(url), str(e) or type(e).__name__) from e
    except asyncpg.PostgresError as e:  # unknown database, bad credentials, too many clients
        reason = f"{e} (SQLSTATE {e.sqlstate})"
        raise DatabaseUnavailable(masked(url), reason, sqlstate=e.sqlstate) from e
    except ValueError as e:  # asyncpg's DSN parser
        raise ConfigurationError(f"malformed database URL {masked(url)!r}: {e}") from e


class Database:
    """A connection pool to the Signoff database.

    Use `await Database.from_settings(settings)`, `await Database.connect(url)` or
    `await Database.from_env()`; `await db.close()` at the end (or `async with`). `settings` are
    the ones it was opened with: the key ring takes its KEK and refresh interval from them.
    `read_only`: every transaction on it is read-only (a hot standby's pool,
    `ledger.store.standby`), so a write fails with `ReadOnlyDatabase` wherever the URL points.
    `fence` keeps what this process saw committed, checked on every new connection
    (`ledger.store.fence`: a database that lost it raises `HistoryLost`).
    """

    def __init__(
        self,
        url: str,
        pool: asyncpg.Pool,
        settings: Settings,
        fence: HistoryFence,
        *,
        read_only: bool = False,
    ) -> None:
        self.url = url
        self.pool = pool
        self.settings = settings
        self.read_only = read_only
        self.fence = fence

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        pool_size: int = 10,
        check_schema: bool = True,
        settings: Settings | None = None,
        read_only: bool = False,
    ) -> Database:
        """Open a pool to `url` (a plain `postgresql://` URL), with `settings` (default: the
        environment's, for this URL: `Settings.from_env(database_url=url)`); with `read_only`,
        every transaction on its connections is read-only (`default_transaction_read_only`).

        The probe connection first checks that no pooler shares server sessions between
        clients (`ledger.store.pooling`): one round trip when connected directly.

        Raises:
            ConfigurationError: the URL is malformed.
            PoolerModeUnsupported: the URL leads through a pooler in transaction or statement
                mode (Signoff needs session pooling).
            DatabaseUnavailable: the server is down or refuses us.
            SchemaOutOfDate: the schema is not at this code's revision (`check_schema`).
            SchemaFromPreRelease: the database was made by a pre-release schema.
        """
        if settings is None:
            from .settings import Settings  # imported late: settings import the key modules

            settings = Settings.from_env(database_url=url)
        # Fail fast with a clear error before the pool hides the cause in its own wrappers.
        # The probe caches no statement: behind a transaction pooler a cached one would run on
        # another server session, before the check below could say why.
        seconds = settings.host_connect_seconds
        uncached = partial(open_raw_connection, url, statement_cache_size=0, host_seconds=seconds)
        probe = await uncached()
        try:
            await require_session_pooling(
                probe, masked(url), uncached, enabled=settings.pooler_check
            )
            current = await revision_on(probe) if check_schema else None
        except asyncpg.InsufficientPrivilegeError as e:
            raise ConfigurationError(
                f"this role may not read the schema revision ({e}); connect as the application "
                "role, or with check_schema=False"
            ) from e
        except Exception as e:  # the probe is no pooled connection: type its errors here
            if (typed := _translated(e, probe, url)) is None:
                raise
            raise typed from e
        finally:
            await probe.close()
        if check_schema:
            migrate.refuse_pre_release(current)
            expected = migrate.head_revision()
            if current != expected:
                raise SchemaOutOfDate(current, expected)
        fence = HistoryFence(masked(url))

        async def init(conn: asyncpg.Connection) -> None:
            if read_only:  # a SET, not a startup parameter, which PgBouncer would refuse
                await conn.execute("SET default_transaction_read_only = on")
            await fence.check(conn)

        # Several hosts: each tried in turn, within its own timeout (a URL with one is asyncpg's).
        each_host = {}
        if len(host_urls(url)) > 1:
            each_host["connect"] = partial(connect_each_host, host_seconds=seconds)
        try:
            pool = await asyncpg.create_pool(
                url,
                **each_host,
                min_size=min(2, pool_size),
                max_size=pool_size,
                init=init,
                reset=_reset,
                # No idle timer per release (a call_later and its cancel on every checkout).
                max_inactive_connection_lifetime=0,
            )
        except (TimeoutError, OSError, asyncpg.PostgresError, _NO_TARGET) as e:
            raise DatabaseUnavailable(masked(url), str(e) or type(e).__name__) from e
        log.debug("database pool opened", url=masked(url), pool_size=pool_size, read_only=read_only)
        return cls(url, pool, settings, fence, read_only=read_only)

    @classmethod
    async def from_settings(cls, settings: Settings, **options: Any) -> Database:
        """Connect to the settings' database: its URL, else the embedded server (started on
        first use)."""
        url = await asyncio.to_thread(settings.resolve_url)
        return await cls.connect(url, settings=settings, **options)

    @classmethod
    async def from_env(cls, **options: Any) -> Database:
        """Connect to `SIGNOFF_DATABASE_URL` / `DATABASE_URL`, else to the embedded server."""
        from .settings import Settings

        return await cls.from_settings(Settings.from_env(), **options)

    @asynccontextmanager
    async def connection(
        self, existing: asyncpg.Connection | None = None
    ) -> AsyncIterator[asyncpg.Connection]:
        """Borrow a pooled asyncpg connection (autocommit unless you open a transaction).

        With `existing` (a caller's connection, perhaps in its own transaction), use that one.

        This is where driver errors become typed (`ledger.errors.translate`): whatever a
        statement on the connection raises leaves as its registered error (`VersionConflict`,
        `UniqueViolation`, `SerializationFailure`, `DatabaseUnavailable`, ...), chained to the
        driver's, or unchanged when it has none.
        """
        if existing is not None:
            try:
                yield existing
            except Exception as e:
                typed = self._translate(e, existing)
                if typed is None:
                    raise
                raise typed from e
            return
        self.fence.refuse_if_lost()  # this database lost what we saw committed: refuse
        try:
            conn = await self.pool.acquire()
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, _NO_TARGET) as e:
            # Connecting failed: the server is down, starting up or refusing us, or (several
            # hosts) none of them is the primary yet.
            raise self._unavailable(e) from e
        try:
            yield conn
        except Exception as e:
            # A DatabaseUnavailable here comes typed from a nested use of this connection.
            typed = e if isinstance(e, DatabaseUnavailable) else self._translate(e, conn)
            if isinstance(typed, DatabaseUnavailable):
                # The server restarted or the network dropped: every pooled connection is
                # likely dead, so replace them all rather than fail once per connection.
                await self.pool.expire_connections()
            if typed is None or typed is e:
                raise
            raise typed from e
        finally:
            await self.pool.release(conn)  # asyncpg shields the release from cancellation

    @asynccontextmanager
    async def transaction(
        self, existing: asyncpg.Connection | None = None
    ) -> AsyncIterator[asyncpg.Connection]:
        """Borrow a pooled asyncpg connection inside one transaction, committed on success; or
        use `existing` and its open transaction as it is. Never a savepoint: an event appended
        in one carries the savepoint's transaction id as its row's `xmin`, not the `txid` it
        records, and `ledger verify` reports it as out of the global order."""
        async with self.connection(existing) as conn:
            if conn.is_in_transaction():
                yield conn
            else:
                async with conn.transaction():
                    yield conn

    def _translate(self, error: Exception, conn: asyncpg.Connection) -> SignoffError | None:
        return _translated(error, conn, self.url)

    def _unavailable(self, error: BaseException) -> DatabaseUnavailable:
        reason = str(error) or type(error).__name__
        sqlstate = error.sqlstate if isinstance(error, asyncpg.PostgresError) else None
        if sqlstate:
            reason = f"{reason} (SQLSTATE {sqlstate})"
        return DatabaseUnavailable(masked(self.url), reason, sqlstate=sqlstate)

    async def close(self) -> None:
        await self.pool.close()

    async def __aenter__(self) -> Database:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def _reset(conn: asyncpg.Connection) -> None:
    if conn.is_in_transaction():
        await conn.execute("ROLLBACK")


async def revision_on(conn: asyncpg.Connection) -> str | None:
    """The alembic revision of `conn`'s database (None: not migrated); every Signoff role may
    read it."""
    exists = await conn.fetchval("SELECT to_regclass('alembic_version') IS NOT NULL")
    if not exists:
        return None
    revision: str | None = await conn.fetchval("SELECT version_num FROM alembic_version")
    return revision


def _translated(error: Exception, conn: asyncpg.Connection, url: str) -> SignoffError | None:
    """The typed error for `error`, raised while using `conn`. A socket error counts as a lost
    connection only when `conn` is closed: code inside a `connection()` block (a gate, a KMS
    call, a progress callback) has sockets of its own, and their errors are not ours."""
    closed = isinstance(error, (asyncpg.InterfaceError, OSError)) and _closed(conn)
    if isinstance(error, OSError) and not closed:
        return None
    if isinstance(error, asyncpg.InternalClientError):
        # The driver lost track of the connection's protocol state: what it does when the
        # server ends the backend under it (a terminated backend, a restart). Unusable from
        # here: closed, so the pool replaces it, and the caller's error is the lost connection.
        if not _closed(conn):
            conn.terminate()
        closed = True
    return translate(error, target=masked(url), connection_closed=closed)
