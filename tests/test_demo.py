"""`signoff demo`, the README's main job: a support agent's refund, approved by a person and run
once across two worker processes, on a fresh database and again on a used one; the workers on a
login that has only `signoff_app`, the reviewer on one that has only `signoff_reviewer`."""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ledger.store.config import configured_url
from ledger.store.db import open_raw_connection
from ledger.store.logins import temporary_login
from tests.support.scratch import with_database

from .processes import kek_env, run_cli

RAN_ONCE = re.compile(r"the refund ran once: 1 payment, made by process 2 \(pid (\d+)\)")
LOGINS = re.compile(
    r"logins +workers +(signoff_demo_worker_\w+) \(only signoff_app\)\n"
    r" +reviewer (signoff_demo_reviewer_\w+) \(only signoff_reviewer\); both for this run"
)


async def _roles_like(server_url: str, pattern: str) -> list[str]:
    admin = await open_raw_connection(server_url)
    try:
        rows = await admin.fetch("SELECT rolname FROM pg_roles WHERE rolname LIKE $1", pattern)
    finally:
        await admin.close()
    return [r["rolname"] for r in rows]


async def test_demo_on_a_fresh_then_a_used_database(
    fresh_database_url: str, server_url: str
) -> None:
    first = await run_cli("demo", database_url=fresh_database_url, env=kek_env(), within=300)
    assert first.code == 0, first.stdout + first.stderr
    ran_once = RAN_ONCE.search(first.stdout)
    assert ran_once, first.stdout
    logins = LOGINS.search(first.stdout)
    assert logins, first.stdout
    assert "check      VERIFIED" in first.stdout
    ledger = first.stdout[first.stdout.index("Ledger of run") :]
    assert re.search(r"call-refund +refund +single_attempt +succeeded +1 +alice +process 2", ledger)
    assert re.search(r"call-lookup +lookup_order +read +succeeded +1 +- +process 1", ledger)
    assert first.stderr == ""  # no log noise: the KEK comes from the environment

    second = await run_cli(
        "demo", "--json", database_url=fresh_database_url, env=kek_env(), within=300
    )
    assert second.code == 0, second.stdout + second.stderr
    report = json.loads(second.stdout)
    assert report["run_id"] not in first.stdout  # a new run on the used database
    assert report["refund"] == {
        "payments": 1,
        "paid_by": [report["processes"]["2"]],
        "ran_once": True,
    }
    calls = {c["call_id"]: c for c in report["calls"]}
    assert calls["call-refund"]["status"] == "succeeded"
    assert calls["call-refund"]["attempts"] == 1
    assert calls["call-refund"]["approved_by"] == ["alice"]
    assert calls["call-refund"]["pid"] == report["processes"]["2"]
    assert calls["call-lookup"]["pid"] == report["processes"]["1"]
    assert report["digest"]["verified"] is True
    assert report["journal"]["intact"] is True
    first_size = int(re.findall(r"tree size +(\d+)", first.stdout)[0])
    assert report["digest"]["tree_size"] > first_size

    # Each process said who the database took it for: the run's own logins, new each run and
    # dropped at its end.
    worker, reviewer = report["logins"]["1"], report["logins"]["reviewer"]
    assert worker.startswith("signoff_demo_worker_") and report["logins"]["2"] == worker
    assert reviewer.startswith("signoff_demo_reviewer_")
    assert {worker, reviewer}.isdisjoint(logins.groups())
    assert await _roles_like(server_url, "signoff_demo_%") == []


async def test_demo_on_a_login_that_may_not_create_roles_runs_every_process_on_it(
    server_url: str,
) -> None:
    """The database's owner without CREATEROLE (a member of `signoff_reviewer`, so it makes the
    decision key): the demo cannot make its logins, says so, and runs on the owner's."""
    name = f"signoff_test_owned_{uuid.uuid4().hex[:12]}"
    async with temporary_login(server_url, "signoff_reviewer", prefix="signoff_owner") as owner:
        admin = await open_raw_connection(server_url)
        user = owner.partition("://")[2].partition(":")[0]
        try:
            await admin.execute(f'CREATE DATABASE "{name}" OWNER {user}')
            url = with_database(owner, name)
            result = await run_cli("demo", "--json", database_url=url, env=kek_env(), within=300)
            shown = await run_cli("demo", database_url=url, env=kek_env(), within=300)
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            await admin.close()
    assert result.code == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["logins"] == {"1": user, "2": user, "reviewer": user}
    assert report["refund"]["ran_once"] is True
    assert shown.code == 0, shown.stdout + shown.stderr
    assert f"every process logs in as {user}, which may not create roles" in shown.stdout
    assert RAN_ONCE.search(shown.stdout), shown.stdout


@pytest.fixture
async def blank_database_url(server_url: str) -> AsyncIterator[str]:
    """An empty database (not migrated), dropped afterwards."""
    name = f"signoff_test_blank_{uuid.uuid4().hex[:12]}"
    admin = await open_raw_connection(server_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        yield with_database(server_url, name)
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def test_demo_without_a_kek_keeps_one_for_the_database(
    blank_database_url: str, tmp_path: Path
) -> None:
    """A database of one's own and no KEK: the first demo migrates it and makes a KEK file named
    by its id (and a reviewer KEK file for its decision key), the next one uses those files, and
    a different KEK is refused."""
    if configured_url() is None:
        pytest.skip("on the embedded server the demo uses the server's own local KEK file")
    unset = ("SIGNOFF_KEK", "SIGNOFF_KEK_FILE", "SIGNOFF_REVIEWER_KEK", "SIGNOFF_REVIEWER_KEK_FILE")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env["SIGNOFF_EMBEDDED_DIR"] = str(tmp_path / "embedded")  # the KEK goes to its ../keks
    for _ in range(2):
        result = await run_cli("demo", database_url=blank_database_url, env=env, within=300)
        assert result.code == 0, result.stdout + result.stderr
        assert RAN_ONCE.search(result.stdout), result.stdout
    (kek_file,) = (tmp_path / "keks").iterdir()
    assert kek_file.name.startswith("kek-")
    assert kek_file.stat().st_mode & 0o777 == 0o600
    assert str(kek_file) in result.stdout
    (reviewer_kek,) = (tmp_path / "reviewer-keks").iterdir()
    assert reviewer_kek.name.startswith("kek-") and reviewer_kek.name != kek_file.name

    other = await run_cli("demo", database_url=blank_database_url, env=kek_env(), within=60)
    assert other.code == 2
    assert kek_file.name in other.stderr  # names the KEK the database needs
