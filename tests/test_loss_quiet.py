"""A database that goes away under a running process leaves structured log lines on its stderr,
never a raw traceback: in a library process that configures no logging, and in `signoff
serve`. The loss is real: the owner terminates every backend of the process's login and keeps
the login from connecting again (as a server that is down would) until it lets it back."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import httpx

from approvals import ApiTokens
from ledger.keys import KeyRing
from ledger.store import Database
from ledger.store.logins import temporary_login

from .support.processes import ROOT, kek_env
from .support.until import until

GUARD = 60.0


@asynccontextmanager
async def login_cut_off(owner_url: str, login_url: str) -> AsyncIterator[None]:
    """While the block runs, `login_url`'s login may not connect and has no connection left."""
    owner = await asyncpg.connect(owner_url)
    probe = await asyncpg.connect(login_url)
    login = await probe.fetchval("SELECT session_user")
    await probe.close()
    try:
        await owner.execute(f'ALTER ROLE "{login}" NOLOGIN')
        await owner.fetchval(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usename = $1",
            login,
        )
        yield
    finally:
        await owner.execute(f'ALTER ROLE "{login}" LOGIN')
        await owner.close()


async def _line(process: asyncio.subprocess.Process) -> str:
    assert process.stdout is not None and process.stderr is not None
    line = await asyncio.wait_for(process.stdout.readline(), GUARD)
    if not line:
        said = await asyncio.wait_for(process.stderr.read(), GUARD)
        raise AssertionError(f"the process ended: {said.decode()[-3000:]}")
    return line.decode().strip()


def _no_raw_traceback(stderr: str, banner: int = 0) -> None:
    lines = stderr.splitlines()[banner:]
    assert "Traceback" not in stderr, stderr[-3000:]
    for line in lines:  # each a structured log line
        json.loads(line)


async def test_a_library_process_logs_no_raw_traceback_when_the_database_goes(
    database_url: str, ring: KeyRing
) -> None:
    async with temporary_login(database_url, "signoff_app") as url:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.support.loss_workers", url,
            cwd=ROOT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**kek_env(), "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        assert process.stdout is not None and process.stdin is not None
        try:
            assert await _line(process) == "ready"
            async with login_cut_off(database_url, url):
                assert await _line(process) == "unavailable"
            assert await _line(process) == "back"
        finally:
            process.stdin.close()
            _, stderr = await asyncio.wait_for(process.communicate(), GUARD)
    assert process.returncode == 0, stderr.decode()[-3000:]
    _no_raw_traceback(stderr.decode())


async def test_signoff_serve_logs_no_raw_traceback_when_the_database_goes(
    database_url: str, db: Database, ring: KeyRing
) -> None:
    token = (await ApiTokens(db).create("loss-auditor", scope="auditor", by="admin")).token
    async with temporary_login(database_url, "signoff_reviewer") as url:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "adapters.cli", "serve", "--port", "0", "--json",
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**kek_env(), "PYTHONPATH": str(ROOT), "SIGNOFF_DATABASE_URL": url},
        )  # fmt: skip
        assert process.stdout is not None
        try:
            started = json.loads(await _line(process))
            headers = {"Authorization": f"Bearer {token}"}
            async with httpx.AsyncClient(base_url=started["url"], timeout=GUARD) as client:
                stream = client.stream("GET", "/v1/approvals/events", headers=headers)
                async with stream as live:
                    assert live.status_code == 200

                    async def answers(status: int) -> bool:
                        return (await client.get("/readyz")).status_code == status

                    async with login_cut_off(database_url, url):
                        await until(lambda: answers(503), GUARD, "the service sees it is down")
                        assert (await client.get("/metrics", headers=headers)).status_code == 503
                    await until(lambda: answers(200), GUARD, "the service is back")
        finally:
            process.terminate()
            _, stderr = await asyncio.wait_for(process.communicate(), GUARD)
    _no_raw_traceback(stderr.decode(), banner=1)
