"""PgBouncer in front of the test server, as a process of the test's own.

`pgbouncer(server_url, mode)` starts Debian's `pgbouncer` on a free loopback port with its
files in a temporary folder (never as a service), and yields `through`: a URL of that server ->
the same database and login through PgBouncer. Every database is proxied (a `*` entry), so the
scratch databases and temporary logins the tests make pass as they are: the superuser of the
server's URL is let in without a password (the server trusts or peer-authenticates it), every
other login with its own password, checked against the server's `pg_shadow` (`auth_query`, run
as that superuser) and passed on with SCRAM to a server that asks for one (the embedded one).

Without a `pgbouncer` binary the test is skipped, unless SIGNOFF_REQUIRE_POOLER is set (CI
sets it), then it fails.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest

from .ports import free_port
from .until import until

__all__ = ["MODES", "pgbouncer", "pgbouncer_binary"]

MODES = ("session", "transaction", "statement")
_STOP_SECONDS = 20.0


def pgbouncer_binary() -> str:
    """The `pgbouncer` program (Debian puts it in /usr/sbin); skips the test without one."""
    found = shutil.which("pgbouncer", path=f"{os.environ.get('PATH', '')}:/usr/sbin")
    if found is None:
        if os.environ.get("SIGNOFF_REQUIRE_POOLER"):
            pytest.fail("SIGNOFF_REQUIRE_POOLER is set and there is no pgbouncer program")
        pytest.skip("no pgbouncer program (apt-get install pgbouncer)")
    return found


def _server_of(url: str) -> tuple[str, int, str]:
    """The host (or socket folder), port and login of `url`."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    host = query.get("host") or parts.hostname or "127.0.0.1"
    port = int(query.get("port") or parts.port or 5432)
    return host, port, parts.username or "postgres"


def _rewriter(port: int) -> Callable[[str], str]:
    def through(url: str) -> str:
        """`url` (a database and login on the proxied server) through PgBouncer."""
        parts = urlsplit(url)
        login = parts.netloc.rpartition("@")[0]
        netloc = f"{login}@127.0.0.1:{port}" if login else f"127.0.0.1:{port}"
        query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k not in ("host", "port")])
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))

    return through


def _config(
    folder: Path, server_url: str, mode: str, port: int, settings: Mapping[str, str]
) -> Path:
    host, server_port, superuser = _server_of(server_url)
    (folder / "users.txt").write_text(f'"{superuser}" ""\n', encoding="utf-8")
    (folder / "hba.conf").write_text(
        f"host all {superuser} 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 scram-sha-256\n",
        encoding="utf-8",
    )
    options = {
        "listen_addr": "127.0.0.1",
        "listen_port": str(port),
        "unix_socket_dir": "",
        "auth_type": "hba",
        "auth_hba_file": str(folder / "hba.conf"),
        "auth_file": str(folder / "users.txt"),
        "auth_user": superuser,
        "auth_query": "SELECT usename, passwd FROM pg_shadow WHERE usename = $1",
        "pool_mode": mode,
        "max_client_conn": "500",
        "default_pool_size": "100",
        **settings,
    }
    config = folder / "pgbouncer.ini"
    config.write_text(
        f"[databases]\n* = host={host} port={server_port}\n\n[pgbouncer]\n"
        + "".join(f"{key} = {value}\n" for key, value in options.items()),
        encoding="utf-8",
    )
    return config


def _run_as(server_url: str) -> list[str]:
    """PgBouncer refuses to run as root: then it runs as the owner of the server's socket
    folder (whom the embedded server lets in as its superuser), or as nobody over TCP."""
    if os.getuid() != 0:
        return []
    host = _server_of(server_url)[0]
    owner = pwd.getpwuid(os.stat(host).st_uid).pw_name if host.startswith("/") else "nobody"
    return ["-u", owner]


async def _stop(process: asyncio.subprocess.Process) -> None:
    """SIGTERM (PgBouncer's immediate shutdown), then SIGKILL; returns once it has exited."""
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), _STOP_SECONDS)
        except TimeoutError:
            process.kill()
            await process.wait()


@asynccontextmanager
async def pgbouncer(
    server_url: str, mode: str, settings: Mapping[str, str] | None = None
) -> AsyncIterator[Callable[[str], str]]:
    """PgBouncer in `mode` (pool_mode) in front of the server of `server_url`, with any other
    `settings` of its [pgbouncer] section; yields the URL rewriter once it accepts clients, and
    stops it (waiting for it to exit) when the block ends, whatever happened."""
    if mode not in MODES:
        raise ValueError(f"no pool mode {mode!r}")
    binary = pgbouncer_binary()
    with tempfile.TemporaryDirectory(prefix="signoff-pgbouncer-") as name:
        folder = Path(name)
        port = free_port()
        config = _config(folder, server_url, mode, port, settings or {})
        log_path = folder / "pgbouncer.log"
        with log_path.open("wb") as log:
            process = await asyncio.create_subprocess_exec(
                binary, *_run_as(server_url), str(config), stdout=log, stderr=log
            )
        try:

            def up() -> bool:
                said = log_path.read_text(errors="replace")
                if process.returncode is not None:
                    raise AssertionError(f"pgbouncer exited {process.returncode}: {said[-2000:]}")
                return "process up" in said

            await until(up, 30, "pgbouncer accepts clients")
            yield _rewriter(port)
        finally:
            await _stop(process)
