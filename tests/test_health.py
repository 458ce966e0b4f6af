"""The health checks, shared by `/readyz` and `signoff doctor`, against a real PostgreSQL: the
service on a login that has only `signoff_reviewer` (what it runs on), the doctor as the real
`signoff` command on least-privileged logins, a schema moved off head in the database's alembic
version row, a transaction that holds the journal's horizon, and no KEK."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
import httpx
import pytest
from alembic.script import ScriptDirectory

from adapters.http.server import running
from adapters.http.service import open_service
from ledger.health import CHECKS
from ledger.journal import Journal, NewEvent
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database, migrate
from ledger.store.db import open_raw_connection
from ledger.store.logins import temporary_login
from ledger.store.settings import Settings
from tests.support.scratch import scratch_database

from .support.processes import TEST_KEK, TEST_REVIEWER_KEK, CliResult, kek_env, run_cli
from .support.until import until

GUARD = 60
ALL_OK = {name: "ok" for name in CHECKS}


@pytest.fixture(scope="module")
async def keyed_url(server_url: str) -> AsyncIterator[str]:
    """A database of this module's, its data keys (the decision key too) made by the owner."""
    async with scratch_database(server_url, prefix="signoff_test") as url:
        async with await Database.connect(url) as db:
            await KeyRing.open(db, LocalKek(TEST_KEK))
        yield url


@asynccontextmanager
async def served(url: str, **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    """The service on a login of `url`'s database with only `signoff_reviewer`: a client."""
    async with temporary_login(url, "signoff_reviewer") as login:
        service = await open_service(
            Settings(
                database_url=login,
                kek=LocalKek(TEST_KEK),
                reviewer_kek=LocalKek(TEST_REVIEWER_KEK),
                **settings,
            ),
            pool_size=2,
        )
        try:
            async with (
                running(service) as (_, port),
                httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=GUARD) as client,
            ):
                yield client
        finally:
            await service.close()


async def ready_when(client: httpx.AsyncClient, status: int) -> dict[str, Any]:
    """Poll `/readyz` until it answers `status`; that answer's body."""
    seen: dict[str, Any] = {}

    async def answers() -> bool:
        response = await client.get("/readyz")
        seen.update(body=response.json(), status=response.status_code)
        return response.status_code == status

    await until(answers, GUARD, f"/readyz answers {status}")
    body: dict[str, Any] = seen["body"]
    return body


def previous_revision() -> str:
    """The revision before head: a schema one migration behind."""
    script = ScriptDirectory.from_config(migrate.alembic_config(""))
    down = script.get_revision(migrate.head_revision()).down_revision
    assert isinstance(down, str)
    return down


@asynccontextmanager
async def version_row_at(url: str, revision: str) -> AsyncIterator[None]:
    """The database's alembic version row says `revision` (set by the owner) until the block
    ends; then head again."""
    owner = await open_raw_connection(url)
    try:
        await owner.execute("UPDATE alembic_version SET version_num = $1", revision)
        try:
            yield
        finally:
            await owner.execute(
                "UPDATE alembic_version SET version_num = $1", migrate.head_revision()
            )
    finally:
        await owner.close()


def check_lines(result: CliResult) -> dict[str, list[str]]:
    """The doctor's text: each check's name -> its lines (status, name, detail; the remedy)."""
    found: dict[str, list[str]] = {}
    name = ""
    for line in result.stdout.splitlines():
        words = line.split()
        if len(words) >= 2 and words[1] in CHECKS:
            name = words[1]
            found[name] = [line]
        elif words and words[0] == "remedy:" and name:
            found[name].append(line)
    return found


async def test_readyz_lists_every_check_as_passing_when_healthy(keyed_url: str) -> None:
    async with served(keyed_url) as client:
        response = await client.get("/readyz")
        assert (await client.get("/healthz")).json() == {"status": "ok"}
    assert response.status_code == 200, response.text
    assert response.json() == {"status": "ready", "checks": ALL_OK}


async def test_readyz_names_the_schema_when_the_version_row_is_not_at_head(
    keyed_url: str,
) -> None:
    behind = previous_revision()
    async with served(keyed_url) as client:
        async with version_row_at(keyed_url, behind):
            body = await ready_when(client, 503)
        assert body["checks"] == {**ALL_OK, "schema": "fail"}
        assert body["error"] == "unavailable" and body["message"] == "not ready: schema"
        # Unauthenticated: check names and statuses, never the revisions, a URL or a login.
        shown = json.dumps(body)
        assert behind not in shown and migrate.head_revision() not in shown
        assert "postgresql" not in shown and "signoff_login" not in shown
        await ready_when(client, 200)


@asynccontextmanager
async def horizon_held(url: str, auditor: str) -> AsyncIterator[None]:
    """An auditor's transaction holds the journal's horizon until the block ends."""
    holder = await asyncpg.connect(auditor)
    try:
        await holder.execute("BEGIN")
        await holder.fetchval("SELECT pg_current_xact_id()")
        # It holds the horizon back once a later transaction commits: until then the
        # snapshot's xmax is its own id, and nothing waits behind it.
        later = await asyncpg.connect(url)
        try:
            await later.fetchval("SELECT pg_current_xact_id()")
        finally:
            await later.close()
        yield
    finally:
        await holder.close()


async def test_readyz_names_the_horizon_when_a_transaction_holds_it_past_the_limit(
    keyed_url: str,
) -> None:
    async with (
        served(keyed_url, horizon_ready_seconds=0.5) as client,
        temporary_login(keyed_url, "signoff_auditor") as auditor,
    ):
        await ready_when(client, 200)
        async with horizon_held(keyed_url, auditor):
            body = await ready_when(client, 503)
        assert body["checks"]["horizon"] == "fail"
        assert body["message"] == "not ready: horizon"
        await ready_when(client, 200)  # the transaction ended: ready again


async def test_by_default_a_held_horizon_warns_and_the_service_stays_ready(
    keyed_url: str,
) -> None:
    """Any login may hold the horizon: unless told to, readiness never fails for it, so one
    login cannot take every replica out of rotation."""
    async with (
        served(keyed_url, horizon_warn_seconds=0.5) as client,
        temporary_login(keyed_url, "signoff_auditor") as auditor,
    ):
        await ready_when(client, 200)
        async with horizon_held(keyed_url, auditor):
            seen: dict[str, Any] = {}

            async def warns() -> bool:
                answer = await client.get("/readyz")
                seen.update(status=answer.status_code, body=answer.json())
                return bool(answer.json()["checks"]["horizon"] == "warn")

            await until(warns, GUARD, "/readyz warns of the horizon")
        assert seen["status"] == 200 and seen["body"]["status"] == "ready"


@pytest.mark.parametrize("role", ["signoff_reviewer", "signoff_app"])
async def test_doctor_prints_every_check_and_exits_0_on_a_least_privileged_login(
    keyed_url: str, role: str
) -> None:
    env = kek_env()
    if role == "signoff_app":  # a worker's host holds no reviewer KEK
        env.pop("SIGNOFF_REVIEWER_KEK", None)
    async with temporary_login(keyed_url, role) as url:
        result = await run_cli("doctor", database_url=url, env=env)
    assert result.code == 0, result.stdout + result.stderr
    lines = check_lines(result)
    assert list(lines) == list(CHECKS)
    assert all(found == [found[0]] and found[0].split()[0] == "ok" for found in lines.values())
    assert result.stdout.splitlines()[-1] == "healthy"
    verifies_only = "decisions verified only" in lines["keys"][0]
    assert verifies_only == (role == "signoff_app")


async def test_doctor_without_a_kek_fails_the_keys_and_says_how_to_provide_one(
    keyed_url: str,
) -> None:
    env = {k: v for k, v in kek_env().items() if k not in ("SIGNOFF_KEK", "SIGNOFF_KEK_FILE")}
    result = await run_cli("doctor", database_url=keyed_url, env=env)
    assert result.code == 1, result.stdout + result.stderr
    lines = check_lines(result)
    status, name, *detail = lines["keys"][0].split()
    assert (status, name) == ("FAIL", "keys") and "no KEK configured" in " ".join(detail)
    assert len(lines["keys"]) == 2 and "SIGNOFF_KEK_FILE" in lines["keys"][1]
    assert [lines[n][0].split()[0] for n in ("database", "schema", "horizon")] == ["ok"] * 3
    assert lines["nonce_budget"][0].split()[:2] == ["WARN", "nonce_budget"]  # it only warns
    assert result.stdout.splitlines()[-1] == "1 check(s) failed: keys"
    assert result.stderr == ""


async def test_doctor_fails_the_schema_behind_head_and_names_the_upgrade(keyed_url: str) -> None:
    behind = previous_revision()
    async with version_row_at(keyed_url, behind):
        result = await run_cli("doctor", "--json", database_url=keyed_url, env=kek_env())
    assert result.code == 1, result.stdout + result.stderr
    document = json.loads(result.stdout)
    checks = {c["name"]: c for c in document["checks"]}
    assert document["ok"] is False and list(checks) == list(CHECKS)
    assert checks["schema"]["status"] == "fail" and behind in checks["schema"]["detail"]
    assert "signoff db upgrade" in checks["schema"]["remedy"]
    assert [c["status"] for n, c in checks.items() if n != "schema"] == ["ok"] * 4


async def test_doctor_measures_the_horizon_on_a_login_that_cannot_see_the_holder(
    keyed_url: str,
) -> None:
    """A reviewer's login does not see an auditor's transaction in pg_stat_activity: the
    doctor takes how long the oldest event behind the horizon has waited."""
    env = {**kek_env(), "SIGNOFF_HORIZON_READY_SECONDS": "0.5"}
    async with (
        temporary_login(keyed_url, "signoff_auditor") as auditor,
        temporary_login(keyed_url, "signoff_reviewer") as reviewer,
        await Database.connect(keyed_url) as db,
    ):
        holder = await asyncpg.connect(auditor)
        try:
            await holder.execute("BEGIN")
            await holder.fetchval("SELECT pg_current_xact_id()")
            await Journal(db).append(
                f"horizon:{uuid.uuid4().hex[:8]}",
                [NewEvent("horizon.noted", {}, actor="t")],
                expected_version=0,
            )
            seen: dict[str, CliResult] = {}

            async def horizon_fails() -> bool:
                seen["last"] = await run_cli("doctor", database_url=reviewer, env=env)
                return "FAIL  horizon" in seen["last"].stdout

            await until(horizon_fails, GUARD, "the doctor fails the horizon")
        finally:
            await holder.close()
    result = seen["last"]
    assert result.code == 1
    [line, remedy] = check_lines(result)["horizon"]
    assert "1 event(s) waiting" in line and "pg_terminate_backend" in remedy


async def test_doctor_refuses_a_usage_error_with_exit_2() -> None:
    result = await run_cli("doctor", "--nope")
    assert result.code == 2 and len(result.stderr.splitlines()) == 1, result.stderr
