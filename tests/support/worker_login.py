"""A scratch database whose data keys the owner made, and a login on it with only `signoff_app`:
what an agent worker connects with (README, "Roles and least privilege")."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.logins import temporary_login
from ledger.store.settings import Settings

from .scratch import scratch_database

__all__ = ["WorkerLogin", "worker_login"]


@dataclass(frozen=True)
class WorkerLogin:
    """`url` logs in with only `signoff_app`; `settings` hold the KEK (for that URL);
    `owner_url` is the database's owner (for what an administrator or reviewer does)."""

    url: str
    settings: Settings
    owner_url: str = ""

    @property
    def name(self) -> str:
        """The worker's login name (its `session_user`)."""
        return str(urlsplit(self.url).username)


@asynccontextmanager
async def worker_login(
    server_url: str, kek: LocalKek, *, prefix: str
) -> AsyncIterator[WorkerLogin]:
    """A fresh database on `server_url` with its keys wrapped by `kek`, and a worker login."""
    async with scratch_database(server_url, prefix=prefix) as owner:
        async with await Database.connect(owner) as db:  # the owner makes the data keys
            await KeyRing.open(db, kek)
        async with temporary_login(owner, "signoff_app") as url:
            yield WorkerLogin(url, Settings(database_url=url, kek=kek), owner)
