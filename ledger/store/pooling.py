"""Refusing, at connect time, a pooler that shares server sessions between its clients.

Signoff keeps state in server sessions: each process LISTENs on one connection for as long as
it runs (`notify.Listener`), and asyncpg prepares a statement once per connection and runs it
by name afterwards. A pooler in session mode (PgBouncer's `pool_mode = session`) gives a client
one server session for as long as it stays connected, and all of that works. In transaction
mode a client holds a server session only while a transaction lasts: a LISTEN stays behind on a
session that then serves other clients, so notifications reach nobody, and a prepared statement
is missing from the next session, or is another client's of the same name. That would fail
later, at random; `Database.connect` refuses at once instead (`PoolerModeUnsupported`).

How it tells, on the probe connection `Database.connect` opens anyway:

1. One round trip: the server's `pg_backend_pid()` against the process id the client was given
   at login (BackendKeyData, what a cancel request names). PostgreSQL gives its own; a pooler
   that routes cancel requests itself gives one of its own making (PgBouncer draws it at
   random for each client). Equal: a direct connection, or a proxy that passes the bytes
   through (HAProxy, an SSH tunnel), and nothing more is asked.
2. Different: a pooler. A second connection opens a transaction (pinning a server session to
   itself in any mode) and reads its pid; the probe reads its pid again; the second commits and
   reads its pid again. In session mode each client keeps its own session: the probe sees one
   pid throughout, the second connection another one, twice. Seeing the probe's first session
   on the second connection, or either of them moving, means the pooler hands sessions between
   clients. An idle PgBouncer pool always shows it: reusing the most recently released server
   (its default) hands the probe's session to the second connection; `server_round_robin`
   (oldest first) moves one of the two. A pooler that refuses the transaction block (SQLSTATE
   08P01: PgBouncer in statement mode) is refused too.

Limits, said plainly: a session pooler is never taken for a transaction pooler (a session it
pinned cannot move while its client stays connected). The other way round is possible: on a
transaction pooler busy with other clients, the sessions may by chance be handed back exactly
as a session pooler would keep them, and a pooler that forwards PostgreSQL's own login key
while multiplexing sessions would be taken for a direct connection (PgBouncer, Odyssey, PgCat
and Supavisor all make their own). Such a setup is not refused here and fails later.

The operator may turn the check off (`SIGNOFF_POOLER_CHECK=off`, `Settings.pooler_check`) for a
pooler it wrongly refuses, such as a proxy that pins a client to one server session once the
client keeps state in it. Then nothing is asked, and a warning says once per process and
database that the operator vouches for the pooler.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import asyncpg

from ..errors import DatabaseUnavailable, PoolerModeUnsupported
from ..log import get_logger

__all__ = ["require_session_pooling"]

# How long a pooler may take to give the second connection a server session: a session pool
# with none free makes it wait (PgBouncer's query_wait_timeout, 120 s by default).
HANDOUT_SECONDS = 10.0
_PROTOCOL_VIOLATION = "08P01"  # what PgBouncer answers a transaction block in statement mode

log = get_logger(__name__)
_unchecked: set[str] = set()  # the targets warned about: once each, not on every connect


async def require_session_pooling(
    probe: asyncpg.Connection,
    target: str,
    connect: Callable[[], Awaitable[asyncpg.Connection]],
    *,
    enabled: bool = True,
) -> None:
    """Raise unless `probe` reaches PostgreSQL directly or through a session-mode pooler.

    `probe` and the connections `connect` opens must not cache statements (asyncpg's
    `statement_cache_size=0`): a cached statement reused on another server session is exactly
    what this looks for. `target` is the masked URL, for errors and the log. Not `enabled`
    (`Settings.pooler_check` off): nothing is asked, and a warning is logged once per target.

    Raises:
        PoolerModeUnsupported: a pooler shares server sessions between clients.
        DatabaseUnavailable: the pooler gave a second connection no server session in time.
    """
    if not enabled:
        if target not in _unchecked:
            _unchecked.add(target)
            log.warning(
                "connection pooler check turned off (SIGNOFF_POOLER_CHECK=off): the operator "
                "vouches that each client keeps its server session",
                target=target,
            )
        return
    pid = await _backend_pid(probe)
    if pid == probe.get_server_pid():
        return  # PostgreSQL's own key: nothing in between that would answer for it
    try:
        async with asyncio.timeout(HANDOUT_SECONDS):
            mode = await _pooling_mode(probe, pid, connect)
    except TimeoutError:
        probe.terminate()  # perhaps still waiting for a session: the caller only closes it
        raise DatabaseUnavailable(
            target,
            f"the pooler gave a second connection no server session within "
            f"{HANDOUT_SECONDS:g} s (is its pool full?)",
        ) from None
    if mode != "session":
        raise PoolerModeUnsupported(target, mode)


async def _pooling_mode(
    probe: asyncpg.Connection, pid: int, connect: Callable[[], Awaitable[asyncpg.Connection]]
) -> str:
    """How the pooler of `probe` (whose server session's pid was `pid` a moment ago) hands out
    server sessions: "session", "transaction" or "statement" (see the module's docstring)."""
    other = await connect()
    polite = False  # close with a goodbye only when the exchange ended outside a transaction
    try:
        try:
            await other.execute("BEGIN")
        except asyncpg.PostgresError as e:
            # PostgreSQL takes a BEGIN; PgBouncer in statement mode answers with a protocol
            # violation and hangs up (asyncpg raises the hang-up, caused by the answer).
            if _PROTOCOL_VIOLATION in (e.sqlstate, getattr(e.__cause__, "sqlstate", None)):
                return "statement"
            raise
        held = await _backend_pid(other)
        if held == pid:
            return "transaction"  # the probe's session went to another client
        again = await _backend_pid(probe)
        await other.execute("COMMIT")
        after = await _backend_pid(other)
        polite = True
    finally:
        if polite:
            await other.close()
        else:  # found out mid-way, failed or timed out: drop it without a round trip
            other.terminate()
    return "session" if (again, after) == (pid, held) else "transaction"


async def _backend_pid(conn: asyncpg.Connection) -> int:
    pid: int = await conn.fetchval("SELECT pg_backend_pid()")
    return pid
