"""The failover harness: a Patroni cluster, Signoff's processes on its multi-host URL under a
steady load, the primary lost (SIGKILL of the node) once per round, and the checks.

`run_rounds` and `final_checks` make the JSON lines `python -m bench.failover` prints: one per round
(`downtime_s`: the longest time no call was acknowledged, from the last call acknowledged
before the primary was lost to the first after; `calls_per_s_before` /
`_after`: acknowledged calls per second over `steady` seconds each side), then the checks
(`ok` and every problem found). Each process's stderr is kept and scanned.
"""

from __future__ import annotations

import asyncio
import base64
import os
import sys
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import asyncpg

from approvals import ReviewerDirectory
from approvals.credentials import ApiTokens
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.logins import temporary_login
from tests.support.processes import ROOT, CliResult, run_cli
from tests.support.replicas import serve_replicas
from tests.support.until import until

from .checks import Acks, database_problems, read_acks
from .cluster import LOOK, Cluster, Node
from .load import REVIEWER

__all__ = ["Options", "Rig", "final_checks", "program", "rig", "run_rounds"]

Process = asyncio.subprocess.Process


@dataclass(frozen=True)
class Options:
    rounds: int = 2
    workers: int = 2
    flows: int = 4
    approval_every: int = 3
    steady: float = 8.0  # seconds of load measured on each side of a failover


@dataclass
class Rig:
    """A migrated database on the cluster, its keys and logins, and the processes on it."""

    cluster: Cluster
    out: Path
    owner_url: str
    env: dict[str, str]  # both KEKs, for the CLI (the owner and reviewer side)
    worker_url: str  # a login with only signoff_app
    worker_env: dict[str, str]  # SIGNOFF_KEK only
    workers: list[Process]
    decider: Process
    said: dict[str, str]  # each process's stderr, once it has stopped

    async def cli(self, *args: str) -> CliResult:
        return await run_cli(*args, database_url=self.owner_url, env=self.env, within=300)

    def acks(self) -> Acks:
        return read_acks(self.out)


async def program(env: dict[str, str], *args: str, ready: bool = True) -> Process:
    pipe = asyncio.subprocess.PIPE
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.failover.load",
        *args,
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT)},
        stdin=pipe,
        stdout=pipe,
        stderr=pipe,
    )
    assert process.stdout is not None
    if not ready:
        return process
    line = await asyncio.wait_for(process.stdout.readline(), 120)
    if line.strip() != b"ready":
        process.kill()
        _, stderr = await process.communicate()
        raise RuntimeError(f"{args[0]} did not start: {stderr.decode()[-2000:]}")
    return process


async def _stop(process: Process, within: float) -> str:
    """Close its stdin (it finishes what it has in hand) and return its stderr."""
    assert process.stdin is not None
    process.stdin.close()
    try:
        _, stderr = await asyncio.wait_for(process.communicate(), within)
    except TimeoutError:
        process.kill()
        _, stderr = await process.communicate()
        return stderr.decode() + f"\n(killed: still running {within:g} s after its stop)"
    text = stderr.decode()
    return text if process.returncode == 0 else f"{text}\n(exited {process.returncode})"


async def _create_database(cluster: Cluster) -> None:
    admin = await asyncpg.connect(cluster.url("postgres"))
    try:
        await admin.execute("CREATE DATABASE signoff")
    finally:
        await admin.close()


@asynccontextmanager
async def rig(cluster: Cluster, out: Path, options: Options) -> AsyncIterator[Rig]:
    """Migrate through the multi-host URL (`signoff db upgrade`), make the keys, a reviewer and
    its API token, a worker login (only `signoff_app`) and a service login (only
    `signoff_reviewer`); start two `signoff serve` replicas, the decider and the workers."""
    await _create_database(cluster)
    owner_url = cluster.url()
    kek, reviewer_kek = os.urandom(32), os.urandom(32)
    env = {
        **os.environ,
        "SIGNOFF_KEK": base64.b64encode(kek).decode(),
        "SIGNOFF_REVIEWER_KEK": base64.b64encode(reviewer_kek).decode(),
    }
    env.pop("SIGNOFF_DATABASE_URL", None)
    upgraded = await run_cli("db", "upgrade", database_url=owner_url, env=env, within=300)
    if upgraded.code != 0:
        raise RuntimeError(f"signoff db upgrade failed: {upgraded.stderr}")
    async with await Database.connect(owner_url, pool_size=2) as db:
        await KeyRing.open(db, LocalKek(kek), reviewer_kek=LocalKek(reviewer_kek))
        await ReviewerDirectory(db).add(REVIEWER, by="failover-harness")
        token = (await ApiTokens(db).create(REVIEWER, by="failover-harness")).token
    said: dict[str, str] = {}
    async with AsyncExitStack() as stack:
        worker_url = await stack.enter_async_context(temporary_login(owner_url, "signoff_app"))
        service_url = await stack.enter_async_context(
            temporary_login(owner_url, "signoff_reviewer")
        )
        service_env = {**env, "PYTHONPATH": str(ROOT), "SIGNOFF_DATABASE_URL": service_url}
        replicas = await stack.enter_async_context(serve_replicas(service_env, within=120))
        decider_args = [a for url in replicas.urls for a in ("--replica", url)]
        decider = await program(
            {**env, "SIGNOFF_FAILOVER_TOKEN": token}, "decider", *decider_args, "--out", str(out)
        )
        worker_env = {k: v for k, v in env.items() if k != "SIGNOFF_REVIEWER_KEK"}
        workers: list[Process] = []
        try:
            for i in range(options.workers):
                workers.append(
                    await program(
                        worker_env,
                        "worker",
                        "--url",
                        worker_url,
                        "--name",
                        f"w{i}",
                        "--flows",
                        str(options.flows),
                        "--approval-every",
                        str(options.approval_every),
                        "--out",
                        str(out),
                    )
                )
            yield Rig(cluster, out, owner_url, env, worker_url, worker_env, workers, decider, said)
        finally:
            for i, worker in enumerate(workers):
                said[f"worker w{i}"] = await _stop(worker, 120)
            said["decider"] = await _stop(decider, 30)
            await stack.aclose()
            for i, text in enumerate(replicas.said):
                said[f"serve {i}"] = text
            for name, text in said.items():  # kept beside the acknowledgements
                (out / f"{name.replace(' ', '-')}.stderr").write_text(text)


# -- rounds ----------------------------------------------------------------------------------


def _outage(acks: Acks, since: float) -> tuple[float, float]:
    """The longest time no call was acknowledged after `since`: the last call acknowledged
    before it and the first after (the library absorbs much of a failover, so the callers'
    errors alone do not show it)."""
    times = sorted(c["t"] for c in acks.of("call") if c["t"] >= since)
    gaps = [(b - a, a, b) for a, b in pairwise(times)]
    _, last_ok, first_ok = max(gaps)
    return last_ok, first_ok


def _calls_between(acks: Acks, start: float, end: float) -> int:
    return sum(1 for c in acks.of("call") if start <= c["t"] < end)


async def failover_round(r: Rig, number: int, options: Options) -> dict[str, Any]:
    """Kill the primary, wait for the new one, measure; then, before another round, bring the
    lost node back as a standby (a strictly synchronous cluster needs one to accept writes
    after the next failover)."""
    cluster = r.cluster
    victim = cluster.leader()
    if victim is None:
        raise RuntimeError("no leader before the round")
    await asyncio.sleep(options.steady)
    killed_at = time.time()
    await asyncio.to_thread(cluster.kill, victim)
    successor: Node = await asyncio.to_thread(cluster.wait_leader, 120, not_=victim)

    elected_at = time.time()

    def served_again() -> bool:
        return any(c["t"] > elected_at for c in r.acks().of("call"))

    await until(served_again, 120, "a call acknowledged on the new primary", step=LOOK)
    last_ok, first_ok = _outage(r.acks(), killed_at - 1)
    errors = [u for u in r.acks().of("unavailable") if u["t"] >= killed_at and "run" in u]
    await asyncio.sleep(options.steady)
    acks = r.acks()
    before = _calls_between(acks, killed_at - options.steady, killed_at) / options.steady
    after = _calls_between(acks, first_ok, first_ok + options.steady) / options.steady
    if number < options.rounds:
        cluster.start_node(victim)
        await asyncio.to_thread(cluster.wait_replicas, 180)
    across = [w for w in r.acks().of("waited") if w["since"] < killed_at < w["t"]]
    return {
        "round": number,
        "killed": victim.name,
        "promoted": successor.name,
        "downtime_s": round(first_ok - last_ok, 2),
        "calls_per_s_before": round(before, 1),
        "calls_per_s_after": round(after, 1),
        "errors_met_by_callers": len(errors),
        "flows_that_met_one": len({u["run"] for u in errors}),
        "waits_across_failover": len(across),
    }


async def run_rounds(r: Rig, options: Options) -> tuple[list[dict[str, Any]], Path]:
    """The rounds, with a digest signed before the first; returns the rounds' lines and the
    digest's path."""
    pre = r.out / "digest-before.json"
    # The digest covers some of the load: once a call was acknowledged, not after a fixed time.
    await until(lambda: bool(r.acks().of("call")), 120, "a call acknowledged first", step=LOOK)
    signed = await r.cli("ledger", "digest", "--out", str(pre))
    if signed.code != 0:
        raise RuntimeError(f"ledger digest failed: {signed.stderr}")
    lines = [await failover_round(r, n + 1, options) for n in range(options.rounds)]
    return lines, pre


async def final_checks(r: Rig, pre: Path) -> dict[str, Any]:
    """After the load stopped: the ledger, the digests and every process's stderr."""
    problems: list[str] = []
    post, keys = r.out / "digest-after.json", r.out / "keys.json"
    proof = r.out / "consistency.json"
    for args in (
        ("ledger", "verify"),
        ("ledger", "verify", "--digest", str(pre)),
        ("ledger", "digest", "--out", str(post)),
        ("keys", "export-public", "--out", str(keys)),
        ("ledger", "consistency", str(pre), str(post), "--out", str(proof)),
    ):
        result = await r.cli(*args)
        if result.code != 0:
            problems.append(f"signoff {' '.join(args[:2])} exit {result.code}: {result.stderr}")
    offline = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "ledger.audit.verifier",
        "consistency",
        str(pre),
        str(post),
        str(proof),
        "--public-keys",
        str(keys),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    said, _ = await offline.communicate()
    if offline.returncode != 0:
        problems.append(f"offline consistency proof: {said.decode().strip()}")
    acks = r.acks()
    problems += await database_problems(r.owner_url, acks)
    problems += [
        f"{line['run']} refused: history lost {line['missing']}" for line in acks.of("refused")
    ]
    statuses: dict[str, int] = {}
    for status in acks.calls().values():
        statuses[status] = statuses.get(status, 0) + 1
    return {
        "calls_acknowledged": len(acks.calls()),
        "statuses": statuses,
        "approvals_decided": len(acks.of("decided")),
        "checkpoints": len(acks.of("checkpoint")),
        "problems": problems,
    }
