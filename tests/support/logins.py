"""Logins with one role each, for tests that prove a code path needs no more."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy.engine import make_url

from ledger.store.db import open_raw_connection

__all__ = ["login", "login_url"]


def login_url(url: str, user: str, password: str) -> str:
    """`url` with another user and password (password auth over TCP or the socket)."""
    return make_url(url).set(username=user, password=password).render_as_string(False)


@asynccontextmanager
async def login(server_url: str, database_url: str, role: str) -> AsyncIterator[str]:
    """A new LOGIN granted only `role` (roles are the cluster's, so each test session makes its
    own); yields its URL to `database_url`, drops it afterwards."""
    name = f"{role}_t{secrets.token_hex(6)}"  # [a-z0-9_]: safe to splice into SQL
    password = secrets.token_urlsafe(18)
    admin = await open_raw_connection(server_url)
    try:
        await admin.execute(f"CREATE ROLE {name} LOGIN PASSWORD '{password}' IN ROLE {role}")
    finally:
        await admin.close()
    try:
        yield login_url(database_url, name, password)
    finally:
        admin = await open_raw_connection(server_url)
        try:
            await admin.execute(f"DROP ROLE IF EXISTS {name}")
        finally:
            await admin.close()
