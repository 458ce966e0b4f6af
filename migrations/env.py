"""Alembic environment: async, on asyncpg, serialized by an advisory lock."""

from __future__ import annotations

import asyncio
import logging.config
from functools import partial

import asyncpg
from alembic import context
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from ledger.store import migrate
from ledger.store.config import HOST_CONNECT_SECONDS, resolve_url
from ledger.store.db import connect_each_host

# Concurrent `upgrade`s (several workers starting at once) take turns instead of racing.
MIGRATION_LOCK = 0x5167_0FF0

config = context.config
if config.config_file_name is not None:
    logging.config.fileConfig(config.config_file_name, disable_existing_loggers=False)


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        transaction_per_migration=True,
        # A caller's hook per step applied (the CLI's progress bar); none by default.
        on_version_apply=config.attributes.get("on_version_apply", ()),
    )
    connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK})
    connection.commit()  # the session-level lock outlives this transaction
    try:
        migrate.refuse_pre_release(_current_revision(connection))
        with context.begin_transaction():
            context.run_migrations()
    finally:
        connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK})
        connection.commit()


def _current_revision(connection: Connection) -> str | None:
    if connection.execute(text("SELECT to_regclass('alembic_version')")).scalar() is None:
        return None
    revision = connection.execute(text("SELECT max(version_num) FROM alembic_version")).scalar()
    connection.commit()
    return None if revision is None else str(revision)


async def _connect(url: str, host_seconds: float) -> asyncpg.Connection:
    conn = await connect_each_host(url, host_seconds=host_seconds)
    # A migration may wait its turn and rewrite large tables: the database's default statement
    # timeout (revision 0002, for every login's sessions) is not for it. A SET, not a startup
    # parameter, which PgBouncer refuses ("unsupported startup parameter").
    await conn.execute("SET statement_timeout = 0")
    return conn


async def _run_online() -> None:
    url = config.attributes.get("signoff_url") or resolve_url()
    # Each host of a multi-host URL within its own timeout (`connect_each_host`).
    seconds = config.attributes.get("signoff_host_seconds", HOST_CONNECT_SECONDS)
    connect = partial(_connect, url, seconds)
    engine = create_async_engine("postgresql+asyncpg://", async_creator=connect, poolclass=NullPool)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run)
    finally:
        await engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported; run against a database")
asyncio.run(_run_online())
