"""What the inbox's tests share: the service on a free loopback port (in this process, or
`signoff serve` in one of its own), its login one that has only `signoff_reviewer`, and signing
in through `POST /inbox/session`."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx

from adapters.http.limits import FailureLimit
from adapters.http.server import running
from adapters.http.service import Service, open_service
from ledger.keys import LocalKek
from ledger.store.logins import temporary_login
from ledger.store.settings import Settings
from tests.support.processes import ROOT, TEST_KEK, TEST_REVIEWER_KEK, kek_env

LENIENT = FailureLimit(1000)


@dataclass
class Served:
    service: Service
    base_url: str
    client: httpx.AsyncClient


@asynccontextmanager
async def served(database_url: str, failure_limit: FailureLimit = LENIENT) -> AsyncIterator[Served]:
    """The service on a free loopback port, and a client of it (`sign_in` leaves its cookie
    jar empty: the tests send the cookie they mean to). Refused tokens are throttled only past
    `failure_limit` (every test's client is 127.0.0.1)."""
    async with temporary_login(database_url, "signoff_reviewer") as url:
        settings = Settings(
            database_url=url, kek=LocalKek(TEST_KEK), reviewer_kek=LocalKek(TEST_REVIEWER_KEK)
        )
        service = await open_service(settings, pool_size=4, failure_limit=failure_limit)
        try:
            async with running(service) as (_, port):
                base_url = f"http://127.0.0.1:{port}"
                async with httpx.AsyncClient(base_url=base_url, timeout=60) as client:
                    yield Served(service, base_url, client)
        finally:
            await service.close()


@dataclass
class Session:
    """A signed-in browser's credentials: its cookie header and its CSRF token."""

    cookie: dict[str, str]
    csrf: str
    set_cookie: str

    def unsafe(self) -> dict[str, str]:
        """Headers of an unsafe request as the inbox page sends it."""
        return {**self.cookie, "X-CSRF-Token": self.csrf}


async def sign_in(client: httpx.AsyncClient, token: str, **headers: str) -> Session:
    """Sign in with `token` as the page does; the client's own cookie jar is left empty."""
    response = await client.post("/inbox/session", json={"token": token}, headers=headers)
    assert response.status_code == 200, response.text
    client.cookies.clear()
    return Session(
        {"Cookie": f"signoff_session={token}"},
        response.json()["csrf_token"],
        response.headers["set-cookie"],
    )


def token_of(headers: dict[str, str]) -> str:
    """The token of `support.http.token_for`'s headers."""
    return headers["Authorization"].removeprefix("Bearer ")


async def serve(url: str, port: int) -> asyncio.subprocess.Process:
    """`signoff serve` in a process of its own, listening on `port`."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "adapters.cli", "serve", "--port", str(port), "--json",
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env={**kek_env(), "PYTHONPATH": str(ROOT), "SIGNOFF_DATABASE_URL": url},
    )  # fmt: skip
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), 60)
    assert line, "the service exited before it listened"
    return process
