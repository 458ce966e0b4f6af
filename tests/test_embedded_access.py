"""Who and what reaches the embedded server: its environment, TCP, passwords, old homes. Real
servers in private homes, real OS processes, no mocks."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import re
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from ledger.store.config import with_login
from ledger.store.embedded import PG_USER, _locked, _Server, ensure_server, stop_server
from ledger.store.logins import temporary_login

from .support.embedded_homes import private_home
from .support.ports import free_port

# Variables the server may hold that are not PostgreSQL's own: what `_minimal_env` passes, and
# what the shell pg_ctl starts the postmaster with sets itself.
_PASSED = re.compile(r"PATH|LANG|LANGUAGE|LC_[A-Z]+|TZ|PWD|OLDPWD|SHLVL|_")


@pytest.fixture
def home() -> Iterator[Path]:
    with private_home() as home:
        yield home


_KEK = base64.b64encode(os.urandom(32)).decode()
_CANARY = "canary-of-the-caller"


@pytest.fixture(scope="module")
def started() -> Iterator[tuple[Path, str]]:
    """One server for the tests that only look at it, started by a caller whose environment
    holds a KEK and other variables: its home and URL."""
    with private_home() as home, pytest.MonkeyPatch.context() as env:
        env.setenv("SIGNOFF_KEK", _KEK)
        env.setenv("SIGNOFF_REVIEWER_KEK", _KEK[::-1])
        env.setenv("CLOUD_TOKEN", _CANARY)
        yield home, ensure_server(home)


def _postmaster_pid(home: Path) -> int:
    return int((home / "data" / "postmaster.pid").read_text().split("\n", 1)[0])


async def _fetch(url: str, *sql: str) -> list[asyncpg.Record]:
    """Run `sql` statements on one connection; the rows of the last one."""
    conn = await asyncpg.connect(url)
    try:
        for statement in sql[:-1]:
            await conn.execute(statement)
        rows: list[asyncpg.Record] = await conn.fetch(sql[-1])
        return rows
    finally:
        await conn.close()


def _environ(pid: int) -> tuple[bytes, dict[str, str]]:
    """The environment `pid` was started with: raw, and by name."""
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return raw, dict(v.split("=", 1) for v in raw.decode().split("\0") if "=" in v)


def _tcp_listeners(pid: int) -> list[str]:
    """The local addresses (hex, as in /proc/net/tcp*) of the TCP sockets `pid` listens on."""
    held = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):  # closed meanwhile
            held.add(os.readlink(fd))
    found = []
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(FileNotFoundError):  # no IPv6
            for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and f"socket:[{fields[9]}]" in held:  # 0A: LISTEN
                    found.append(fields[1])
    return found


async def test_the_server_never_sees_the_callers_environment(started: tuple[Path, str]) -> None:
    """The KEK in the caller's environment: not in the postmaster's, nor in what its superuser
    reads with COPY ... FROM PROGRAM, nor any other variable of the caller's."""
    home, url = started
    raw, postmaster = _environ(_postmaster_pid(home))
    copy = "COPY caller_env FROM PROGRAM 'env'"
    rows = await _fetch(url, "CREATE TEMP TABLE caller_env (line text)", copy, "TABLE caller_env")
    backend = dict(r["line"].split("=", 1) for r in rows if "=" in r["line"])
    assert "PGDATA" in postmaster and "PGDATA" in backend  # we did read the server's
    for env in (postmaster, backend):
        assert [k for k in env if k.startswith("SIGNOFF_")] == []
        assert _KEK not in "".join(env.values()) and _CANARY not in env.values()
        from_caller = {k for k in env if k in os.environ and not _PASSED.fullmatch(k)}
        assert from_caller == set()
    assert _KEK.encode() not in raw


async def test_tcp_is_refused_even_when_the_data_folder_is_started_by_hand(home: Path) -> None:
    """No TCP socket when we start it, and none when someone starts the data folder with plain
    pg_ctl (on a free port: the machine's own server may hold 5432)."""
    url = await asyncio.to_thread(ensure_server, home)
    assert _tcp_listeners(_postmaster_pid(home)) == []
    assert (await _fetch(url, "SHOW listen_addresses"))[0][0] == ""
    await asyncio.to_thread(stop_server, home)

    srv = _Server(home)
    port = free_port()
    by_hand = ("-w", "-o", f"-k '{home / 'run'}' -p {port}", "-D", str(home / "data"))
    srv.run_cmd("pg_ctl", *by_hand, "-l", str(srv.logfile), "start", as_server=True)
    try:
        on_port = url.replace("port=5432", f"port={port}")
        assert (await _fetch(on_port, "SHOW listen_addresses"))[0][0] == ""
        assert _tcp_listeners(_postmaster_pid(home)) == []
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
    finally:
        await asyncio.to_thread(stop_server, home)


async def test_other_roles_log_in_with_their_password_only(started: tuple[Path, str]) -> None:
    _, url = started
    async with temporary_login(url, "pg_read_all_data") as worker:
        name = worker.split("//", 1)[1].split(":", 1)[0]
        as_worker = url.replace(f"//{PG_USER}@", f"//{name}@")  # the same URL, no password
        for password in (None, "", "not-the-password"):
            with pytest.raises(asyncpg.InvalidPasswordError):
                await asyncpg.connect(as_worker, password=password)
        assert (await _fetch(worker, "SELECT current_user"))[0][0] == name
    # The superuser needs none: it is the OS user the server runs as, or root (peer).
    assert (await _fetch(url, "SELECT current_user"))[0][0] == PG_USER


async def test_no_access_rule_trusts_anyone(started: tuple[Path, str]) -> None:
    home, url = started
    hba = (home / "data" / "pg_hba.conf").read_text()
    rules = [line.split() for line in hba.splitlines() if line.strip() and line[0] != "#"]
    assert [r for r in rules if "trust" in r] == []
    sql = "SELECT type, user_name, auth_method, error FROM pg_hba_file_rules ORDER BY rule_number"
    effective = [tuple(r) for r in await _fetch(url, sql)]
    assert effective == [
        ("local", [PG_USER], "peer", None),
        ("local", ["all"], "scram-sha-256", None),
    ]


def _old_style_home(home: Path, *, keep_running: bool = False) -> None:
    """A home as earlier versions made it: initdb --auth=trust, TCP in postgresql.conf, started
    the old way (in the caller's whole environment); it holds a table, a row and a login role
    without a password."""
    srv = _Server(home)
    with _locked(home):  # makes the home
        srv._prepare()
        old_initdb = ("--auth=trust", "-U", PG_USER, "-E", "UTF8", "--no-locale")
        srv.run_cmd("initdb", *old_initdb, "-D", str(srv.data), as_server=True)
        with (srv.data / "postgresql.conf").open("a") as conf:
            conf.write("listen_addresses = 'localhost'\n")
        old_start = ("-w", "-o", f"-h '' -k '{srv.run}' -p 5432", "-D", str(srv.data))
        user = srv.user
        subprocess.run(
            [str(srv._server_bin() / "pg_ctl"), *old_start, "-l", str(srv.logfile), "start"],
            env={k: v for k, v in os.environ.items() if not k.startswith("PG")},
            cwd=home,
            check=True,
            capture_output=True,
            start_new_session=True,
            user=user.pw_uid if user else None,
            group=user.pw_gid if user else None,
            extra_groups=[] if user else None,
        )
        srv.ensure_database()
    url = srv.url()
    sql = ("CREATE TABLE kept (v text)", "INSERT INTO kept VALUES ('still here')")
    asyncio.run(_fetch(url, *sql, "CREATE ROLE old_worker LOGIN"))
    asyncio.run(_fetch(with_login(url, "old_worker", "any"), "SELECT 1"))  # trust, then
    if not keep_running:
        stop_server(home)


async def test_a_home_made_by_an_earlier_version_is_brought_up_to_date(home: Path) -> None:
    await asyncio.to_thread(_old_style_home, home)
    url = await asyncio.to_thread(ensure_server, home)
    methods = await _fetch(url, "SELECT DISTINCT auth_method FROM pg_hba_file_rules")
    assert sorted(r[0] for r in methods) == ["peer", "scram-sha-256"]
    assert (await _fetch(url, "TABLE kept"))[0][0] == "still here"
    with pytest.raises(asyncpg.InvalidPasswordError):
        await asyncpg.connect(with_login(url, "old_worker", "any"))
    # The settings file says no TCP too, for a start by hand; its old line is left in place.
    last = "SELECT setting FROM pg_file_settings WHERE name = 'listen_addresses' ORDER BY seqno"
    assert [r[0] for r in await _fetch(url, last)] == ["localhost", ""]
    assert _tcp_listeners(_postmaster_pid(home)) == []


async def test_a_login_role_connects_with_its_password_on_the_test_server(
    database_url: str,
) -> None:
    """`temporary_login` works on whichever server the session uses (embedded or configured)."""
    async with temporary_login(database_url, "signoff_app") as worker:
        sql = "SELECT current_user, pg_has_role('signoff_app', 'member'), rolsuper"
        rows = await _fetch(worker, sql + " FROM pg_roles WHERE rolname = current_user")
        assert rows[0][0].startswith("signoff_login_") and rows[0][1:] == (True, False)


async def test_a_server_an_earlier_version_left_running_asks_for_passwords_at_once(
    home: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Reused, not restarted (its sessions stay): its access rules are reloaded, and a warning
    says that it still holds the environment it was started with."""
    monkeypatch.setenv("SIGNOFF_KEK", base64.b64encode(os.urandom(32)).decode())
    await asyncio.to_thread(_old_style_home, home, keep_running=True)
    pid = _postmaster_pid(home)
    with caplog.at_level(logging.WARNING, logger="signoff"):
        url = await asyncio.to_thread(ensure_server, home)
    assert _postmaster_pid(home) == pid
    assert [r.message for r in caplog.records if r.levelno == logging.WARNING] == [
        "embedded postgres was started with the caller's environment: stop it "
        "(signoff embedded stop) so that the next start leaves it out"
    ]
    with pytest.raises(asyncpg.InvalidPasswordError):
        await asyncpg.connect(with_login(url, "old_worker", "any"))
    assert (await _fetch(url, "TABLE kept"))[0][0] == "still here"
    await asyncio.to_thread(stop_server, home)
    assert (await asyncio.to_thread(ensure_server, home)) == url
    assert b"SIGNOFF_KEK" not in _environ(_postmaster_pid(home))[0]
