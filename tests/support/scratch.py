"""Throwaway databases on a server, for tests and benchmarks: created fresh, migrated, dropped."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit, urlunsplit

from ledger.store import migrate
from ledger.store.db import open_raw_connection

__all__ = ["scratch_database", "with_database"]


def with_database(url: str, name: str) -> str:
    """`url` pointing at database `name` instead."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


@asynccontextmanager
async def scratch_database(
    server_url: str, *, prefix: str = "signoff_scratch", migrated: bool = True
) -> AsyncIterator[str]:
    """Create a uniquely named database on the server of `server_url`, migrate it to head (unless
    not `migrated`: empty, for a test that migrates it itself), yield its URL and drop it
    afterwards (closing any connection left open to it)."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = await open_raw_connection(server_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')  # name is ours: [a-z0-9_] only
    finally:
        await admin.close()
    url = with_database(server_url, name)
    try:
        if migrated:
            await asyncio.to_thread(migrate.upgrade, url)
        yield url
    finally:
        admin = await open_raw_connection(server_url)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()
