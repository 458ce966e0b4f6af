"""Private embedded servers for tests, and a count of the ones left running.

Every private home lives below one folder of this session (`session_base()`), so the count sees
this session's servers only, never those of another test run on the same machine.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ledger.store.embedded import stop_server

__all__ = [
    "kill_servers_in",
    "new_base",
    "private_home",
    "remove_session_base",
    "servers_left",
    "session_base",
]

_base: Path | None = None


def session_base() -> Path:
    """This session's folder of private homes, made on first use (0711: as root the server user
    must traverse it). As root it is under /var/lib, beside the default home: each home holds a
    copy of the binaries, and /tmp may be mounted noexec."""
    global _base
    if _base is None:
        parent = "/var/lib" if os.geteuid() == 0 else None
        _base = Path(tempfile.mkdtemp(prefix="signoff-test-", dir=parent))
        _base.chmod(0o711)
    return _base


def remove_session_base() -> None:
    """Kill what is left below the session's folder and remove it."""
    global _base
    if _base is not None:
        kill_servers_in(_base)
        shutil.rmtree(_base, ignore_errors=True)
        _base = None


def new_base() -> Path:
    """A fresh folder (0711) below the session's, for one or more homes."""
    base = Path(tempfile.mkdtemp(dir=session_base()))
    base.chmod(0o711)
    return base


@contextlib.contextmanager
def private_home() -> Iterator[Path]:
    """A home that does not exist yet, two levels below a fresh folder. Its server is stopped
    afterwards, and killed if stopping fails, so nothing outlives the test."""
    base = new_base()
    try:
        yield base / "x" / "home"
    finally:
        try:
            stop_server(base / "x" / "home")
        finally:
            kill_servers_in(base)
            shutil.rmtree(base, ignore_errors=True)


def servers_left(folder: Path | None = None) -> dict[int, Path]:
    """Live postgres processes (postmasters and their children) whose data folder is below
    `folder` (default: the session's), by pid. Postgres processes chdir to their data folder."""
    folder = folder or session_base()
    found = {}
    for proc in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError, ValueError):  # gone meanwhile, or not ours to see
            stat_line = (proc / "stat").read_text()
            comm, rest = stat_line[stat_line.find("(") + 1 :].rsplit(")", 1)
            if not comm.startswith("postgres") or rest.split()[0] in ("Z", "X"):
                continue
            cwd = Path(os.readlink(proc / "cwd"))
            if cwd.is_relative_to(folder):
                found[int(proc.name)] = cwd
    return found


def kill_servers_in(folder: Path) -> None:
    """Last resort, for servers that would not stop: kill every postgres process below
    `folder` (this session's throwaway servers only)."""
    for pid in servers_left(folder):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
