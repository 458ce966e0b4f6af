"""`signoff serve` bounds what it waits for from a client, over real sockets: a request head
trickled a byte at a time, or a connection that says nothing, is closed by the server within
its deadlines (`SIGNOFF_HTTP_HEADER_SECONDS`, `SIGNOFF_HTTP_IDLE_SECONDS`), while clients that
send their requests are served."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx
import pytest

from adapters.http.server import running
from adapters.http.service import open_service
from ledger.store.logins import temporary_login
from ledger.store.settings import Settings

from .support.processes import REVIEWER_KEK_ENV, kek_env

CONNECTIONS = 40
DEADLINE = 1.0  # both deadlines, in seconds
GUARD = 20.0  # how long a connection the server should close may live before the test fails


@pytest.fixture(scope="module")
async def port(database_url: str) -> AsyncIterator[int]:
    async with temporary_login(database_url, "signoff_reviewer") as url:
        # The deadlines come from the environment, as `signoff serve` reads them.
        environ = {
            **kek_env(),
            **REVIEWER_KEK_ENV,
            "SIGNOFF_DATABASE_URL": url,
            "SIGNOFF_HTTP_HEADER_SECONDS": str(DEADLINE),
            "SIGNOFF_HTTP_IDLE_SECONDS": str(DEADLINE),
        }
        service = await open_service(Settings.from_env(environ), pool_size=2)
        try:
            async with running(service) as (_, bound):
                yield bound
        finally:
            await service.close()


async def _closed_by_server(reader: asyncio.StreamReader) -> bool:
    """Whether the server closes the connection (EOF, or a reset) within `GUARD`."""
    try:
        await asyncio.wait_for(reader.read(), GUARD)
    except TimeoutError:
        return False
    except ConnectionError:
        pass
    return True


async def _trickle(port: int) -> tuple[bool, float]:
    """Send a request head one byte every 0.1 s, never finishing it; (closed by the server,
    seconds it lived)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.monotonic()
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 10_000

    async def drip() -> None:
        for byte in head:
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.1)

    dripping = asyncio.create_task(drip())
    try:
        closed = await _closed_by_server(reader)
    finally:
        dripping.cancel()
        writer.close()
    return closed, time.monotonic() - started


async def test_trickling_request_heads_are_closed_while_others_are_served(port: int) -> None:
    trickles = [asyncio.create_task(_trickle(port)) for _ in range(CONNECTIONS)]
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=GUARD) as client:
        assert (await client.get("/healthz")).status_code == 200
    results = await asyncio.gather(*trickles)
    assert all(closed for closed, _ in results), "a trickling connection was held open"
    # Each was closed at its head deadline, not when the test gave up.
    assert max(lived for _, lived in results) < GUARD / 2


async def test_a_silent_connection_is_closed(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        assert await _closed_by_server(reader)
    finally:
        writer.close()


async def test_a_body_that_stops_arriving_is_closed(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            b"POST /v1/approvals/x/decision HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
        )
        await writer.drain()
        assert await _closed_by_server(reader)
    finally:
        writer.close()


async def test_a_keep_alive_connection_serves_requests_in_time(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for _ in range(3):
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            await writer.drain()
            status = await asyncio.wait_for(reader.readline(), GUARD)
            assert status.startswith(b"HTTP/1.1 200"), status
            length = 0
            while (line := await asyncio.wait_for(reader.readline(), GUARD)) != b"\r\n":
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            await asyncio.wait_for(reader.readexactly(length), GUARD)
    finally:
        writer.close()
