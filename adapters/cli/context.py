"""What commands share: the database named by the command line or the environment."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from ledger.store import Database
from ledger.store.config import resolve_url


@asynccontextmanager
async def open_database(args: argparse.Namespace) -> AsyncIterator[Database]:
    """The database of `--database-url`, else the environment's, else the embedded server."""
    url = await asyncio.to_thread(resolve_url, args.database_url)
    async with await Database.connect(url, pool_size=2) as db:
        yield db
