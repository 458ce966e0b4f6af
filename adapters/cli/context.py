"""What commands share: the settings of the environment and the command line, and their database."""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from ledger.store import Database
from ledger.store.settings import Settings
from ledger.store.standby import StandbyLag, open_standby, standby_lag

from .output import safe


def settings_of(args: argparse.Namespace) -> Settings:
    """The settings: the environment's, with `--database-url` (and `--read-database-url`,
    on the commands that read from a standby) over its URLs. Read once per command (on first
    use: a command that needs none, `keys new-kek`, works with broken ones)."""
    settings = getattr(args, "settings", None)
    if settings is None:
        settings = Settings.from_env(
            database_url=getattr(args, "database_url", None),
            read_database_url=getattr(args, "read_database_url", None),
        )
        args.settings = settings
    assert isinstance(settings, Settings)
    return settings


@asynccontextmanager
async def open_database(args: argparse.Namespace) -> AsyncIterator[Database]:
    """The database of `--database-url`, else the environment's, else the embedded server."""
    async with await Database.from_settings(settings_of(args), pool_size=2) as db:
        yield db


@asynccontextmanager
async def open_reading_database(args: argparse.Namespace) -> AsyncIterator[Database]:
    """For a command that only reads: the hot standby of `--read-database-url` (or
    `SIGNOFF_READ_DATABASE_URL`), read-only, once a line on stderr has said how far behind
    the primary (`--database-url`, when one is configured) it is; without one, the database
    of `open_database`. The measure is kept as `args.standby_lag` for `--json` output."""
    settings = settings_of(args)
    if settings.read_database_url is None:
        async with open_database(args) as db:
            yield db
        return
    async with await open_standby(settings, pool_size=2) as db:
        lag = await standby_lag(db, settings.database_url)
        print(safe(lag.line()), file=sys.stderr, flush=True)
        args.standby_lag = lag
        yield db


def lag_of(args: argparse.Namespace) -> StandbyLag | None:
    """The standby's lag `open_reading_database` measured, if it read from one."""
    lag = getattr(args, "standby_lag", None)
    return lag if isinstance(lag, StandbyLag) else None
