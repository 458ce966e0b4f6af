"""A notification is only a hint: a login that holds only `signoff_auditor` sends hundreds of
`pg_notify` on the service's channels, naming a real pending approval and made-up ones, and no
event stream carries anything for them; the real event after them arrives, alone."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest

from adapters.http.server import running
from adapters.http.service import open_service
from approvals import NOTIFY_CHANNEL, REQUESTS_CHANNEL, ApprovalStore
from ledger.calls._sql import CHANNEL as CALLS_CHANNEL
from ledger.keys import LocalKek
from ledger.store import Database
from ledger.store.logins import temporary_login
from ledger.store.settings import Settings

from .support.http import ask, token_for, unique
from .support.processes import TEST_KEK, TEST_REVIEWER_KEK

GUARD = 60
FAKES = 300


@pytest.fixture(scope="module")
async def client(database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with temporary_login(database_url, "signoff_reviewer") as url:
        settings = Settings(
            database_url=url, kek=LocalKek(TEST_KEK), reviewer_kek=LocalKek(TEST_REVIEWER_KEK)
        )
        service = await open_service(settings, pool_size=3)
        try:
            async with (
                running(service) as (_, port),
                httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=GUARD) as client,
            ):
                yield client
        finally:
            await service.close()


async def _frames(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """Each event of an SSE response: its fields, `data` parsed."""
    frame: dict[str, Any] = {}
    async for line in response.aiter_lines():
        if line == "" and "data" in frame:
            yield {**frame, "data": json.loads(frame["data"])}
            frame = {}
        elif line and not line.startswith(":"):
            name, _, value = line.partition(":")
            frame[name] = value.removeprefix(" ")


async def _until(frames: AsyncIterator[dict[str, Any]], approval_id: str) -> list[dict[str, Any]]:
    """The frames up to the first of `approval_id` (that one last)."""
    seen = []
    async with asyncio.timeout(GUARD):
        async for frame in frames:
            seen.append(frame)
            if frame["data"]["approval_id"] == approval_id:
                return seen
    raise AssertionError("the stream ended")


async def test_notifications_from_any_login_make_no_stream_events(
    client: httpx.AsyncClient, db: Database, store: ApprovalStore, database_url: str
) -> None:
    headers = await token_for(db, unique("watcher"), scope="auditor")
    pending = await ask(store, "ann")
    async with client.stream("GET", "/v1/approvals/events", headers=headers) as response:
        assert response.status_code == 200
        frames = _frames(response)
        # The stream is live once a real request reaches it.
        warm = await ask(store, "ann")
        await _until(frames, warm)
        async with temporary_login(database_url, "signoff_auditor") as url:
            attacker = await asyncpg.connect(url)
            try:
                for i in range(FAKES):
                    for channel in (NOTIFY_CHANNEL, REQUESTS_CHANNEL, CALLS_CHANNEL):
                        target = pending if i % 2 else f"apr-{i:032x}"
                        await attacker.execute(
                            "SELECT pg_notify($1, $2)", channel, f"approval:{target}"
                        )
            finally:
                await attacker.close()
        real = await ask(store, "ann")
        seen = await _until(frames, real)
    # Only the real request came, with its journal position as its id.
    assert [f["data"]["approval_id"] for f in seen] == [real]
    assert seen[0]["event"] == "approval.requested" and seen[0]["id"].isdigit()
