"""Login roles for tests: a role with a password and chosen memberships, that connects to any
server the tests use (the embedded one asks every role but its superuser for a password; a
server that trusts local connections ignores it)."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import quote, urlsplit, urlunsplit

from ledger.store.db import open_raw_connection

__all__ = ["login_role", "with_login"]


def with_login(url: str, user: str, password: str) -> str:
    """`url` logging in as `user` with `password` instead (same host or socket, same database)."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


@asynccontextmanager
async def login_role(
    admin_url: str, *member_of: str, prefix: str = "signoff_login"
) -> AsyncIterator[str]:
    """Create a LOGIN role with a random password, member of `member_of` (e.g. "signoff_app"),
    yield a URL of `admin_url`'s database that logs in as it, and drop the role afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    password = secrets.token_hex(16)
    admin = await open_raw_connection(admin_url)
    try:  # name and password are ours: [a-z0-9_] only
        await admin.execute(f"CREATE ROLE {name} LOGIN PASSWORD '{password}'")
        for role in member_of:
            await admin.execute(f'GRANT "{role}" TO {name}')
    finally:
        await admin.close()
    try:
        yield with_login(admin_url, name, password)
    finally:
        admin = await open_raw_connection(admin_url)
        try:
            await admin.execute(f"DROP OWNED BY {name}")  # what it made in this database
            await admin.execute(f"DROP ROLE {name}")
        finally:
            await admin.close()
