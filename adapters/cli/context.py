"""What commands share: the settings of the environment and the command line, and their database."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from ledger.store import Database
from ledger.store.settings import Settings


def settings_of(args: argparse.Namespace) -> Settings:
    """The settings: the environment's, with `--database-url` over its URL. Read once per
    command (on first use: a command that needs none, `keys new-kek`, works with broken ones)."""
    settings = getattr(args, "settings", None)
    if settings is None:
        settings = Settings.from_env(database_url=getattr(args, "database_url", None))
        args.settings = settings
    assert isinstance(settings, Settings)
    return settings


@asynccontextmanager
async def open_database(args: argparse.Namespace) -> AsyncIterator[Database]:
    """The database of `--database-url`, else the environment's, else the embedded server."""
    async with await Database.from_settings(settings_of(args), pool_size=2) as db:
        yield db
