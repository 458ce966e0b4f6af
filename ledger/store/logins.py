"""Logins of one role each, made for a while and dropped after it: `signoff demo`'s worker
processes log in with one that has only `signoff_app` and its reviewer with one that has only
`signoff_reviewer`, as a deployment's would (docs/pages/operations/roles.md); the tests
make theirs the same way.

A login has a random name and password, connects to any server Signoff uses (the embedded one
asks every role but its superuser for a password; a server that trusts local connections
ignores it), and its password expires after `VALID_FOR` even if nothing drops it (a process
killed before its `finally`).
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

import asyncpg

from .config import with_login
from .db import open_raw_connection

__all__ = ["VALID_FOR", "temporary_login"]

VALID_FOR = timedelta(hours=1)


@asynccontextmanager
async def temporary_login(
    admin_url: str, *member_of: str, prefix: str = "signoff_login"
) -> AsyncIterator[str]:
    """Create a LOGIN role `<prefix>_<random>` with a random password, member of `member_of`
    (e.g. "signoff_app") and nothing else; yield a URL of `admin_url`'s database that logs in
    as it; drop it afterwards (with what it owns in that database).

    Raises:
        asyncpg.InsufficientPrivilegeError: `admin_url`'s login may not create roles or grant
            one of `member_of`; nothing is left behind.
    """
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    password = secrets.token_hex(16)
    until = (datetime.now(UTC) + VALID_FOR).isoformat()
    admin = await open_raw_connection(admin_url)
    try:  # name, password and time are ours ([a-z0-9_:+.-]); roles are quoted
        async with admin.transaction():  # a refused GRANT takes the role back with it
            await admin.execute(
                f"CREATE ROLE {name} LOGIN PASSWORD '{password}' VALID UNTIL '{until}'"
            )
            for role in member_of:
                await admin.execute(f'GRANT "{role}" TO {name}')
    finally:
        await admin.close()
    try:
        yield with_login(admin_url, name, password)
    finally:
        await _drop(admin_url, name)


async def _drop(admin_url: str, name: str) -> None:
    admin = await open_raw_connection(admin_url)
    try:
        await admin.execute(f"DROP OWNED BY {name}")  # what it made in this database
        await admin.execute(f"DROP ROLE {name}")
    except asyncpg.UndefinedObjectError:
        pass  # dropped already
    finally:
        await admin.close()
