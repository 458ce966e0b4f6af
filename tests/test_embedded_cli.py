"""`signoff embedded status | url | stop`, on real servers in private homes (as root, under
/var/lib like the default home), as a user would run them."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
from asyncio.subprocess import PIPE
from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger.store.embedded import ensure_server

from .support.embedded_homes import private_home, servers_left
from .support.processes import CliResult, kek_env, run_cli
from .support.until import until


@pytest.fixture
def home() -> Iterator[Path]:
    with private_home() as home:
        yield home


def _env(home: Path, **extra: str) -> dict[str, str]:
    """No database URL: the commands use the embedded server of `home`."""
    env = {k: v for k, v in kek_env().items() if k not in ("SIGNOFF_DATABASE_URL", "DATABASE_URL")}
    return {**env, "SIGNOFF_EMBEDDED_DIR": str(home), **extra}


async def _embedded(home: Path, *args: str, **extra: str) -> CliResult:
    return await run_cli("embedded", *args, env=_env(home, **extra))


def _postmaster_pid(home: Path) -> int:
    return int((home / "data" / "postmaster.pid").read_text().split("\n", 1)[0])


async def test_status_of_a_home_not_made_yet_creates_nothing(home: Path) -> None:
    text = await _embedded(home, "status")
    assert text.code == 0, text.stderr
    assert f"in {home}" in text.stdout
    assert "not running" in text.stdout
    assert "signoff embedded stop" in text.stdout
    result = await _embedded(home, "status", "--json")
    assert result.code == 0, result.stderr
    status = json.loads(result.stdout)
    assert status["running"] is False and status["pid"] is None
    assert status["home"] == str(home) and status["data"] == str(home / "data")
    assert status["data_version"] is None
    assert status["used"] is True
    assert not await asyncio.to_thread(home.exists)


async def test_status_names_the_running_server_its_folders_and_version(home: Path) -> None:
    url = await asyncio.to_thread(ensure_server, home)
    result = await _embedded(home, "status", "--json")
    assert result.code == 0, result.stderr
    status = json.loads(result.stdout)
    assert status["running"] is True
    assert status["pid"] == _postmaster_pid(home)
    assert status["data"] == str(home / "data")
    assert status["socket_dir"] == str(home / "run")
    assert status["url"] == url
    assert status["version"].split(".")[0] == status["data_version"]
    text = await _embedded(home, "status")
    assert f"running (pid {status['pid']})" in text.stdout
    assert f"PostgreSQL {status['version']} in {home}" in text.stdout
    used = await _embedded(home, "status", "--json", SIGNOFF_DATABASE_URL="postgresql://x@h/db")
    assert json.loads(used.stdout)["used"] is False


async def test_url_connects_psql_to_the_signoff_database(home: Path) -> None:
    """As root too: the server runs as the system user and its socket folder is 0700."""
    url = await asyncio.to_thread(ensure_server, home)
    result = await _embedded(home, "url")
    assert result.code == 0, result.stderr
    assert result.stdout.strip() == url
    assert result.stderr == ""
    command = json.loads((await _embedded(home, "url", "--json")).stdout)["psql"]
    sql = "select current_database() || ' ' || current_setting('server_version_num')"
    psql = await asyncio.create_subprocess_exec(
        *shlex.split(command), "-XtAc", sql, stdout=PIPE, stderr=PIPE
    )
    out, err = await asyncio.wait_for(psql.communicate(), 30)
    assert psql.returncode == 0, err.decode()
    database, version = out.decode().split()
    assert database == "signoff"
    status = json.loads((await _embedded(home, "status", "--json")).stdout)
    assert version.startswith(status["data_version"])


async def test_url_of_a_stopped_server_says_it_is_not_running(home: Path) -> None:
    result = await _embedded(home, "url")
    assert result.code == 0
    assert result.stdout.strip().startswith("postgresql://postgres@/signoff?host=")
    assert "not running" in result.stderr
    assert json.loads((await _embedded(home, "url", "--json")).stdout)["running"] is False


async def test_stop_stops_the_server_and_a_second_stop_is_no_error(home: Path) -> None:
    await asyncio.to_thread(ensure_server, home)
    pid = _postmaster_pid(home)
    result = await _embedded(home, "stop")
    assert result.code == 0, result.stderr
    assert f"stopped the embedded server (pid {pid})" in result.stdout
    await _until_no_server_in(home)
    again = await _embedded(home, "stop", "--json")
    assert again.code == 0, again.stderr
    assert json.loads(again.stdout) == {"home": str(home), "stopped": False, "pid": None}
    status = json.loads((await _embedded(home, "status", "--json")).stdout)
    assert status["running"] is False


@pytest.mark.parametrize("command", ["status", "url", "stop"])
async def test_an_unusable_home_is_one_line_and_exit_2(home: Path, command: str) -> None:
    too_long = home / ("x" * 100)
    result = await run_cli("embedded", command, env=_env(too_long))
    assert result.code == 2
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert "SIGNOFF_EMBEDDED_DIR" in result.stderr
    assert result.stdout == ""


async def test_the_demo_says_the_server_keeps_running_and_how_to_stop_it(home: Path) -> None:
    demo = await run_cli("demo", env=_env(home), within=300)
    assert demo.code == 0, demo.stdout + demo.stderr
    assert f"The embedded PostgreSQL in {home} keeps running" in demo.stdout
    assert "Stop it with: signoff embedded stop" in demo.stdout
    assert servers_left(home)
    stop = await _embedded(home, "stop")
    assert stop.code == 0, stop.stderr
    await _until_no_server_in(home)


async def _until_no_server_in(home: Path) -> None:
    """A stop returns once the postmaster removed its pid file, a moment before its last
    process exits: wait for the processes, with a deadline."""
    await until(lambda: servers_left(home) == {}, 30, f"no postgres process left in {home}")


@pytest.mark.skipif(os.geteuid() != 0, reason="as root only")
async def test_as_root_the_socket_folder_stays_closed_to_other_users(home: Path) -> None:
    """Only root and the server user may reach the socket (and `postgres` logs in by peer)."""
    await asyncio.to_thread(ensure_server, home)
    run = home / "run"
    assert run.stat().st_mode & 0o777 == 0o700
    assert run.stat().st_uid == (home / "data").stat().st_uid != 0
