"""Throwaway databases on a server, for tests and benchmarks: created fresh, migrated, dropped.

Copying a migrated database costs a fraction of creating one and migrating it (and the suite
makes some 160), so a test session opens `migrated_template(server_url)` once: while it is open,
every migrated scratch database on that server is cloned from one database migrated at the
start (`CREATE DATABASE ... TEMPLATE`).
Elsewhere (benchmarks, other servers) each scratch database is migrated for real.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from ledger.store import migrate
from ledger.store.db import open_raw_connection

__all__ = ["event_count", "migrated_template", "scratch_database", "template_of", "with_database"]

# The server URL -> the name of its migrated template, while `migrated_template` is open.
_templates: dict[str, str] = {}

# How long a clone waits for a connection to the template to end (autovacuum may visit it).
_CLONE_SECONDS = 30.0


def with_database(url: str, name: str) -> str:
    """`url` pointing at database `name` instead."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


async def event_count(url: str) -> int:
    """How many events the database of `url` holds (on a standby too: it only reads)."""
    conn = await open_raw_connection(url)
    try:
        count: int = await conn.fetchval("SELECT count(*) FROM events")
        return count
    finally:
        await conn.close()


async def _execute(server_url: str, statement: str) -> None:
    admin = await open_raw_connection(server_url)
    try:
        await admin.execute(statement)
    finally:
        await admin.close()


async def _create(server_url: str, name: str, template: str | None) -> None:
    """CREATE DATABASE `name`, a copy of `template` when given. PostgreSQL refuses to copy a
    database another session is connected to; the template allows no connections, but
    autovacuum may still be in it for a moment, so that refusal is retried until a deadline."""
    # Both names are ours: [a-z0-9_] only.
    statement = f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else "")
    deadline = time.monotonic() + _CLONE_SECONDS
    while True:
        try:
            await _execute(server_url, statement)
            return
        except asyncpg.ObjectInUseError:
            if template is None or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


async def _drop(server_url: str, name: str) -> None:
    await _execute(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@asynccontextmanager
async def migrated_template(server_url: str) -> AsyncIterator[str]:
    """Migrate one database on the server of `server_url` and, until the block ends, clone every
    migrated `scratch_database` on that server from it; drop it at the end.

    Its name is unique, so concurrent sessions on one server never share a template (nor block
    each other's copies). Once migrated it accepts no connections: a copy cannot be refused
    because a test (or a pool left open) is connected to it."""
    name = f"signoff_template_{uuid.uuid4().hex[:12]}"
    await _create(server_url, name, template=None)
    try:
        await asyncio.to_thread(migrate.upgrade, with_database(server_url, name))
        await _execute(server_url, f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS false')
        _templates[server_url] = name
        try:
            yield name
        finally:
            del _templates[server_url]
    finally:
        await _drop(server_url, name)


def template_of(server_url: str) -> str | None:
    """The name of the migrated template open for the server of `server_url`, if any."""
    return _templates.get(server_url)


@asynccontextmanager
async def scratch_database(
    server_url: str, *, prefix: str = "signoff_scratch", migrated: bool = True
) -> AsyncIterator[str]:
    """Create a uniquely named database on the server of `server_url`, migrated to head (a copy
    of the server's `migrated_template` while one is open, else migrated here; or empty when not
    `migrated`, for a test that migrates it itself), yield its URL and drop it afterwards
    (closing any connection left open to it)."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    template = template_of(server_url) if migrated else None
    await _create(server_url, name, template)
    url = with_database(server_url, name)
    try:
        if migrated and template is None:
            await asyncio.to_thread(migrate.upgrade, url)
        yield url
    finally:
        await _drop(server_url, name)
