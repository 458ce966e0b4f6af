"""Three PostgreSQL 15 servers on loopback, managed by Patroni over one etcd, all in a temporary
folder and all stopped when the `cluster()` block ends (even on failure).

Run as root (as CI is), PostgreSQL refuses to start: etcd and Patroni then run as the
`postgres` system user, which owns the folder. Nothing listens beyond 127.0.0.1.

`synchronous=True` is the configuration that keeps every guarantee across a failover:
`synchronous_mode` and `synchronous_mode_strict` (a commit returns only once a standby has
flushed it; with no standby left, writes wait rather than go unreplicated) and
`maximum_lag_on_failover: 0`. `synchronous=False` is PostgreSQL's default asynchronous
streaming, with a failover that may promote a standby behind the primary.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from tests.support.ports import free_ports
from tests.support.until import blocking_until

__all__ = ["LOOK", "PG_BIN", "Cluster", "Node", "cluster", "installed"]

PG_BIN = Path("/usr/lib/postgresql/15/bin")
SCOPE = "signoff-failover"
SERVICE_USER = "postgres"  # who runs the servers when we are root
# Leader key TTL and loop: a lost primary's key lapses within ~10 s (Patroni requires
# loop_wait + 2 * retry_timeout <= ttl).
TTL, LOOP_WAIT, RETRY_TIMEOUT = 10, 1, 4
# Seconds between two looks while waiting: each asks Patroni or reads every process's log, on
# the machine the load runs on.
LOOK = 0.1


def installed() -> str | None:
    """None when etcd, Patroni and PostgreSQL 15 are all here; else what is missing."""
    missing = [name for name in ("etcd", "patroni") if shutil.which(name) is None]
    if not (PG_BIN / "postgres").exists():
        missing.append(str(PG_BIN / "postgres"))
    return ", ".join(missing) or None


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, whose parent has not reaped it, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid`."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with suppress(OSError, IndexError, ValueError):
            if int(stat.read_text().rpartition(")")[2].split()[1]) == pid:
                found.append(int(stat.parent.name))
    return found


def _remove_segments(segments: dict[int, int]) -> None:
    """Remove the shared memory segments that killed postmasters left: each only while it is
    still the one that postmaster made and nothing is attached (a restarted server removes
    its old one itself)."""
    try:
        rows = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    except OSError:
        return
    for row in rows:
        fields = row.split()  # key shmid perms size cpid lpid nattch ...
        shmid, creator, attached = int(fields[1]), int(fields[4]), int(fields[6])
        if segments.get(shmid) == creator and attached == 0:
            subprocess.run(["ipcrm", "-m", str(shmid)], check=False, capture_output=True)


@dataclass
class Node:
    name: str
    pg_port: int
    rest_port: int
    home: Path
    process: subprocess.Popen[bytes] | None = None
    log: TextIO | None = field(default=None, repr=False)

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def config(self) -> Path:
        return self.home / "patroni.yml"

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data_dir / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def shared_memory(self) -> int | None:
        """The id of the postmaster's System V segment (postmaster.pid, line 7: key and id)."""
        try:
            return int((self.data_dir / "postmaster.pid").read_text().splitlines()[6].split()[1])
        except (OSError, ValueError, IndexError):
            return None


class Cluster:
    """etcd and three Patroni nodes in `root`; `url` reaches the primary, whichever it is."""

    def __init__(self, root: Path, *, synchronous: bool) -> None:
        self.root = root
        self.synchronous = synchronous
        self.user = pwd.getpwnam(SERVICE_USER) if os.geteuid() == 0 else None
        ports = free_ports(8)  # distinct: etcd's two, then each node's server and REST API
        self.etcd_port, self.etcd_peer = ports[:2]
        self.etcd: subprocess.Popen[bytes] | None = None
        self.nodes = [
            Node(f"pg{i}", ports[2 + 2 * i], ports[3 + 2 * i], root / f"pg{i}") for i in range(3)
        ]
        self._logs: list[TextIO] = []
        self._segments: dict[int, int] = {}  # System V segment id -> the postmaster that made it

    # -- where to connect -------------------------------------------------------------------

    def url(self, database: str = "signoff", user: str = "postgres") -> str:
        """The multi-host URL every Signoff process uses: whichever node is the primary."""
        hosts = ",".join(f"127.0.0.1:{n.pg_port}" for n in self.nodes)
        return f"postgresql://{user}@{hosts}/{database}?target_session_attrs=read-write"

    def node_url(self, node: Node, database: str = "signoff") -> str:
        return f"postgresql://postgres@127.0.0.1:{node.pg_port}/{database}"

    # -- starting and stopping --------------------------------------------------------------

    def _spawn(self, command: list[str], log_name: str) -> subprocess.Popen[bytes]:
        log = open(self.root / log_name, "a")  # noqa: SIM115 -- closed in stop()
        self._logs.append(log)
        env = {
            "PATH": f"{PG_BIN}:/usr/bin:/bin",
            "HOME": str(self.root),
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
        }
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.root,
            env=env,
            user=self.user.pw_uid if self.user else None,
            group=self.user.pw_gid if self.user else None,
            extra_groups=[] if self.user else None,
            start_new_session=True,
        )

    def _mkdir(self, path: Path) -> None:
        path.mkdir(mode=0o700, exist_ok=True)
        if self.user is not None:
            os.chown(path, self.user.pw_uid, self.user.pw_gid)

    def start(self) -> None:
        self._mkdir(self.root)
        self._mkdir(self.root / "etcd")
        client, peer = f"http://127.0.0.1:{self.etcd_port}", f"http://127.0.0.1:{self.etcd_peer}"
        self.etcd = self._spawn(
            [
                "etcd",
                "--name=failover",
                f"--data-dir={self.root / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=failover={peer}",
            ],
            "etcd.log",
        )

        def etcd_up() -> bool:
            return self._http(f"{client}/health") is not None

        blocking_until(etcd_up, 30, "etcd answers", step=LOOK)
        for node in self.nodes:
            self._mkdir(node.home)
            node.config.write_text(json.dumps(self._config(node), indent=2))  # YAML reads JSON
            self.start_node(node)

    def start_node(self, node: Node) -> None:
        node.process = self._spawn(["patroni", str(node.config)], f"{node.name}.log")

    def stop_node(self, node: Node) -> None:
        """Stop `node` cleanly: Patroni shuts its PostgreSQL down first."""
        if node.process is not None and node.process.poll() is None:
            node.process.terminate()
            node.process.wait(60)

    def stop(self) -> None:
        """Everything, gracefully where it still answers, then by force; whatever fails, the
        rest is still stopped."""
        try:
            for node in self.nodes:
                if node.process is not None and node.process.poll() is None:
                    node.process.terminate()  # Patroni stops its PostgreSQL first
            deadline = time.monotonic() + 30
            for node in self.nodes:
                if node.process is not None:
                    with suppress(subprocess.TimeoutExpired):
                        node.process.wait(max(0.1, deadline - time.monotonic()))
        finally:
            for node in self.nodes:
                with suppress(Exception):
                    self.kill(node)
            if self.etcd is not None:
                self.etcd.kill()
                self.etcd.wait()
            for log in self._logs:
                log.close()
            _remove_segments(self._segments)

    def kill(self, node: Node) -> None:
        """Lose `node` as a machine is lost: SIGKILL its Patroni, its postmaster and every
        backend, nothing flushed. The postmaster is stopped first, so that it forks no backend
        while its children are listed (each child leads a process group of its own)."""
        if node.process is not None and node.process.poll() is None:
            node.process.kill()
        pid = node.postmaster_pid()
        if pid is not None and (segment := node.shared_memory()) is not None:
            self._segments[segment] = pid  # a killed server leaves it behind
        if pid is not None and _alive(pid):
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
                for victim in [*_children(pid), pid]:
                    with suppress(ProcessLookupError):
                        os.kill(victim, signal.SIGKILL)
        if node.process is not None:
            node.process.wait()
        if pid is not None:
            blocking_until(lambda: not _alive(pid), 30, f"{node.name} is gone", step=LOOK)

    # -- what Patroni says ------------------------------------------------------------------

    def members(self) -> list[dict[str, Any]]:
        """The cluster's members as the first Patroni that answers reports them."""
        for node in self.nodes:
            if node.process is None or node.process.poll() is not None:
                continue
            answer = self._http(f"http://127.0.0.1:{node.rest_port}/cluster")
            if answer is not None:
                members: list[dict[str, Any]] = answer.get("members", [])
                return members
        return []

    def leader(self) -> Node | None:
        """The node that is the running primary now, if any."""
        for member in self.members():
            if member.get("role") == "leader" and member.get("state") == "running":
                return self.node(member["name"])
        return None

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def wait_leader(self, within: float, *, not_: Node | None = None) -> Node:
        found: list[Node] = []

        def elected() -> bool:
            leader = self.leader()
            if leader is not None and leader is not not_:
                found.append(leader)
            return bool(found)

        blocking_until(elected, within, "a leader", step=LOOK)
        return found[0]

    def wait_replicas(self, within: float, count: int = 2) -> None:
        """Until `count` standbys stream with no lag (in sync mode, one of them synchronous)."""

        def streaming() -> bool:
            members = self.members()
            standbys = [
                m
                for m in members
                if m.get("role") in ("replica", "sync_standby")
                and m.get("state") in ("running", "streaming")
                and m.get("lag") in (0, "0")
            ]
            sync = any(m.get("role") == "sync_standby" for m in members)
            return len(standbys) >= count and (sync or not self.synchronous)

        blocking_until(streaming, within, f"{count} standbys streaming", step=LOOK)

    # -- internals ---------------------------------------------------------------------------

    def _config(self, node: Node) -> dict[str, Any]:
        parameters: dict[str, Any] = {
            "max_connections": 100,
            "shared_buffers": "32MB",
            "wal_keep_size": "256MB",
            "wal_log_hints": "on",  # pg_rewind brings a lost primary back as a standby
            "unix_socket_directories": str(node.home),
            # Dynamic shared memory in the data folder, not /dev/shm: a node killed and never
            # restarted leaves nothing behind when its folder goes.
            "dynamic_shared_memory_type": "mmap",
        }
        dcs: dict[str, Any] = {
            "ttl": TTL,
            "loop_wait": LOOP_WAIT,
            "retry_timeout": RETRY_TIMEOUT,
            "postgresql": {"use_pg_rewind": True, "parameters": parameters},
        }
        if self.synchronous:
            dcs |= {
                "synchronous_mode": True,
                "synchronous_mode_strict": True,
                "maximum_lag_on_failover": 0,
            }
        else:  # any standby may be promoted, however far behind
            dcs |= {"synchronous_mode": False, "maximum_lag_on_failover": 1 << 40}
        hba = [
            "local all all trust",
            "host all all 127.0.0.1/32 trust",
            "host replication all 127.0.0.1/32 trust",
        ]
        return {
            "scope": SCOPE,
            "name": node.name,
            "log": {"level": "WARNING"},
            "restapi": {
                "listen": f"127.0.0.1:{node.rest_port}",
                "connect_address": f"127.0.0.1:{node.rest_port}",
            },
            "etcd3": {"hosts": [f"127.0.0.1:{self.etcd_port}"]},
            "bootstrap": {"dcs": dcs, "initdb": [{"encoding": "UTF8"}], "pg_hba": hba},
            "postgresql": {
                "listen": f"127.0.0.1:{node.pg_port}",
                "connect_address": f"127.0.0.1:{node.pg_port}",
                "data_dir": str(node.data_dir),
                "bin_dir": str(PG_BIN),
                "pgpass": str(node.home / "pgpass"),
                "authentication": {
                    "superuser": {"username": "postgres", "password": "postgres"},
                    "replication": {"username": "replicator", "password": "replicator"},
                },
                "parameters": {"unix_socket_directories": str(node.home)},
                "pg_hba": hba,
                "remove_data_directory_on_rewind_failure": True,
            },
        }

    @staticmethod
    def _http(url: str) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                answer: dict[str, Any] = json.loads(response.read())
                return answer
        except (OSError, ValueError, urllib.error.URLError):
            return None


@contextmanager
def cluster(*, synchronous: bool, keep: bool = False) -> Iterator[Cluster]:
    """A started cluster with a leader and two streaming standbys; stopped and removed when the
    block ends (the folder is kept with `keep`, for its logs)."""
    root = Path(tempfile.mkdtemp(prefix="signoff-failover-"))
    os.chmod(root, 0o711)
    made = Cluster(root / "cluster", synchronous=synchronous)
    try:
        made.start()
        made.wait_leader(120)
        made.wait_replicas(120)
        yield made
    finally:
        made.stop()
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
