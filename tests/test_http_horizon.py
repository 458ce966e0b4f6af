"""The service shows how far the journal's horizon lags, over real HTTP: a login that holds
only `signoff_auditor` opens a transaction, takes a transaction id and goes idle; `/metrics`
shows the lag and the events waiting behind it, and the service logs a warning."""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator

import asyncpg
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from adapters.http.server import running
from adapters.http.service import open_service
from ledger.journal import Journal, NewEvent
from ledger.store import Database
from ledger.store.logins import temporary_login
from ledger.store.settings import Settings

from .support.http import token_for, unique
from .support.processes import REVIEWER_KEK_ENV, kek_env
from .support.until import until

GUARD = 60
WARN = 1.0


@pytest.fixture(scope="module")
async def client(database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with temporary_login(database_url, "signoff_reviewer") as url:
        environ = {
            **kek_env(),
            **REVIEWER_KEK_ENV,
            "SIGNOFF_DATABASE_URL": url,
            "SIGNOFF_HORIZON_WARN_SECONDS": str(WARN),
        }
        service = await open_service(Settings.from_env(environ), pool_size=3)
        try:
            async with (
                running(service) as (_, port),
                httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=GUARD) as client,
            ):
                yield client
        finally:
            await service.close()


async def _gauges(client: httpx.AsyncClient, headers: dict[str, str]) -> dict[str, float]:
    response = await client.get("/metrics", headers=headers)
    assert response.status_code == 200, response.text
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
        if sample.name.startswith("signoff_journal_")
    }


async def test_an_idle_transaction_shows_as_horizon_lag_and_a_warning(
    client: httpx.AsyncClient,
    db: Database,
    database_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    headers = await token_for(db, unique("prom"), scope="auditor")
    seen: dict[str, float] = {}
    async with temporary_login(database_url, "signoff_auditor") as url:
        holder = await asyncpg.connect(url)
        try:
            await holder.execute("BEGIN")
            await holder.fetchval("SELECT pg_current_xact_id()")
            await Journal(db).append(
                f"horizon:{uuid.uuid4().hex[:8]}",
                [NewEvent("horizon.noted", {}, actor="t")],
                expected_version=0,
            )

            async def lagging() -> bool:
                seen.update(await _gauges(client, headers))
                return seen["signoff_journal_horizon_lag_seconds"] >= WARN

            with caplog.at_level(logging.WARNING, logger="signoff"):
                await until(lagging, 30, "the horizon lag on /metrics")
            assert seen["signoff_journal_events_behind_horizon"] >= 1
            held = [r for r in caplog.records if "horizon held" in r.getMessage()]
            assert held and held[0].__dict__.get("events_behind", 0) >= 1
        finally:
            await holder.close()
