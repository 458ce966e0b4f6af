"""A primary and its streaming hot standby: two PostgreSQL 15 servers of this machine's binaries,
on free loopback ports, in a folder below the session's private homes (`embedded_homes`), so
the session's check of servers left running sees them too.

As root, the servers run as the `postgres` OS user (PostgreSQL refuses to run as root), in
folders owned by it. Both trust loopback connections, as the suite's server does: they are
reachable from this machine only, and are removed when the block ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import shutil
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from ledger.store.db import open_raw_connection

from .embedded_homes import kill_servers_in, new_base
from .ports import free_ports
from .until import until

__all__ = ["BIN", "Pair", "missing_binaries", "primary_and_standby"]

BIN = Path("/usr/lib/postgresql/15/bin")
_TOOLS = ("initdb", "pg_ctl", "pg_basebackup")
_SERVER_USER = "postgres"  # the OS user the servers run as when the tests run as root
_DATABASE = "signoff"
_START_SECONDS = 60
_WAIT = ("-w", "-t", str(_START_SECONDS))
_CONF = """
listen_addresses = '127.0.0.1'
port = {port}
unix_socket_directories = '{sockets}'
wal_level = replica
max_wal_senders = 4
hot_standby = on
max_connections = 60
shared_buffers = 16MB
fsync = off  # throwaway servers: durability buys nothing here
synchronous_commit = off
full_page_writes = off
"""


@dataclass(frozen=True)
class Pair:
    primary_url: str
    standby_url: str
    folder: Path


def missing_binaries() -> str | None:
    """Why the pair cannot be made on this machine (None: it can)."""
    missing = [tool for tool in _TOOLS if not (BIN / tool).is_file()]
    return f"no {', '.join(missing)} in {BIN}" if missing else None


def _server_user() -> pwd.struct_passwd | None:
    return pwd.getpwnam(_SERVER_USER) if os.geteuid() == 0 else None


def _run(user: pwd.struct_passwd | None, tool: str, *args: str, cwd: Path) -> None:
    """Run a PostgreSQL program (as `user` when given) with a bare environment: PG* variables
    of the caller would retarget it."""
    process = subprocess.run(
        [str(BIN / tool), *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"},
        timeout=_START_SECONDS + 30,
        start_new_session=True,  # a Ctrl-C of the test run must not reach the postmaster
        user=None if user is None else user.pw_uid,
        group=None if user is None else user.pw_gid,
        extra_groups=None if user is None else [],
    )
    if process.returncode != 0:
        raise AssertionError(f"{tool} exited {process.returncode}: {process.stderr[-2000:]}")


def _folder(path: Path, user: pwd.struct_passwd | None) -> Path:
    path.mkdir(mode=0o700)
    if user is not None:
        os.chown(path, user.pw_uid, user.pw_gid)
    return path


def _start(user: pwd.struct_passwd | None, data: Path, folder: Path) -> None:
    log = folder / f"{data.name}.log"
    try:
        _run(user, "pg_ctl", "-D", str(data), "-l", str(log), *_WAIT, "start", cwd=folder)
    except AssertionError as e:
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        raise AssertionError(f"{e}\n--- {log} ---\n{tail}") from None


def _stop(user: pwd.struct_passwd | None, data: Path, folder: Path) -> None:
    if (data / "postmaster.pid").exists():
        _run(user, "pg_ctl", "-D", str(data), "-m", "fast", *_WAIT, "stop", cwd=folder)


def _make(folder: Path, user: pwd.struct_passwd | None) -> tuple[int, int]:
    """Initialise and start the primary, copy it into a standby (`pg_basebackup -R`: it
    streams from the primary) and start that; their ports."""
    sockets = _folder(folder / "sockets", user)
    owner = _folder(folder / "servers", user)
    primary, standby = owner / "primary", owner / "standby"
    primary_port, standby_port = free_ports(2)
    initdb = ("-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
    _run(user, "initdb", "-D", str(primary), *initdb, cwd=owner)
    with (primary / "postgresql.conf").open("a") as conf:
        conf.write(_CONF.format(port=primary_port, sockets=sockets))
    _start(user, primary, owner)
    source = ("-h", "127.0.0.1", "-p", str(primary_port), "-U", "postgres")
    copy = ("-R", "-X", "stream", "-c", "fast", "--no-sync")  # -R: a standby of the source
    _run(user, "pg_basebackup", *source, "-D", str(standby), *copy, cwd=owner)
    with (standby / "postgresql.conf").open("a") as conf:
        conf.write(f"port = {standby_port}\n")
    _start(user, standby, owner)
    return primary_port, standby_port


def _stop_both(folder: Path, user: pwd.struct_passwd | None) -> None:
    """Stop the standby, then the primary; kill what would not stop; remove the folder."""
    owner = folder / "servers"
    try:
        for data in (owner / "standby", owner / "primary"):
            with contextlib.suppress(AssertionError, OSError, subprocess.SubprocessError):
                _stop(user, data, owner)
    finally:
        kill_servers_in(folder)
        shutil.rmtree(folder, ignore_errors=True)


def _url(port: int, database: str = _DATABASE) -> str:
    return f"postgresql://postgres@127.0.0.1:{port}/{database}"


async def replayed(primary_url: str, standby_url: str, within: float = 60) -> None:
    """Wait until the standby has replayed everything the primary has written so far (its
    current WAL position when this is called)."""
    primary = await open_raw_connection(primary_url)
    try:
        target = await primary.fetchval("SELECT pg_current_wal_lsn()::text")
    finally:
        await primary.close()
    standby = await open_raw_connection(standby_url)

    async def caught_up() -> bool:
        behind = await standby.fetchval(
            "SELECT pg_wal_lsn_diff($1::text::pg_lsn, pg_last_wal_replay_lsn())", target
        )
        return bool(behind <= 0)

    try:
        await until(caught_up, within, f"the standby replays the primary up to {target}")
    finally:
        await standby.close()


@asynccontextmanager
async def primary_and_standby() -> AsyncIterator[Pair]:
    """A primary with an empty database `signoff` and a hot standby streaming from it, once
    the standby has replayed that database; both stopped and removed when the block ends,
    however it ends."""
    user = _server_user()
    folder = new_base()
    try:
        primary_port, standby_port = await asyncio.to_thread(_make, folder, user)
        admin = await open_raw_connection(_url(primary_port, "postgres"))
        try:
            await admin.execute(f"CREATE DATABASE {_DATABASE}")
        finally:
            await admin.close()
        pair = Pair(_url(primary_port), _url(standby_port), folder)
        await replayed(pair.primary_url, _url(standby_port, "postgres"))
        yield pair
    finally:
        await asyncio.to_thread(_stop_both, folder, user)
