"""Tool calls across worker processes: 1, 2, 4 and 8 OS processes, one caller each, making calls
through `ToolLedger.execute` (an empty single-attempt tool) against one PostgreSQL, 1 call in 10
needing an approval that another process decides; beside raw asyncpg single-row commits at the
same concurrency, measured in the same run. How close to the server's own limit the system gets
as workers are added.

A worker is this module run with `--worker URL` (SIGNOFF_KEK only: no reviewer KEK). It warms
up, prints `ready`, waits for a line on stdin, calls for `--seconds` and prints one JSON line:
its elapsed seconds and per-call latencies (those of approved calls also apart). A call needing
an approval requests it, waits for the decision (woken by NOTIFY) and runs through `execute`
with the approval gate, so its latency includes the decision. The decider is
bench/approvals.py's (`--decider URL`, the reviewer side, with both KEKs).

Prints one JSON line per level (`workers`, `calls_per_s`, `p50_ms`, `p99_ms` over all calls,
`approved_p50_ms` over those that waited for a decision, `raw_commits_per_s`, `ratio` = calls/s
over raw commits/s), then a summary as its last line: `ours` = calls/s at the most workers,
`baseline` = raw commits/s there, `ratio`. Each call is two commits (intent, outcome), so 0.5
is the ceiling. `--approval-every 0` makes calls that need no approval only. The database
comes from SIGNOFF_DATABASE_URL / DATABASE_URL, else the embedded server; a scratch database
is created and dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from adapters.runtime.spec import task_run_id
from approvals import ApprovalStore, ReviewerDirectory, approval_gate
from bench.common import bench_database, percentile, raw_commit_rate
from ledger.calls.model import CallContext, Effect, ToolCall, ToolPolicy
from ledger.calls.service import ToolLedger
from ledger.keys import KeyRing, LocalKek
from ledger.log import configure_logging
from ledger.store import Database

ROOT = Path(__file__).resolve().parent.parent
LEVELS = (1, 2, 4, 8)
Process = asyncio.subprocess.Process


# -- a worker process ------------------------------------------------------------------------


async def worker(url: str, seconds: float, approval_every: int) -> None:
    """Call until `seconds` have passed after the go line on stdin; print the figures."""
    async with await Database.connect(url, pool_size=2) as db:
        ring = await KeyRing.open(db)  # SIGNOFF_KEK from the environment; no reviewer KEK
        ledger, store = ToolLedger(db, ring), ApprovalStore(db, ring)
        policy = ToolPolicy(Effect.SINGLE_ATTEMPT)
        run_id = f"bench-{uuid.uuid4().hex[:12]}"

        async def empty(args: dict[str, Any], context: CallContext) -> None:
            return None

        def needs_approval(n: int) -> bool:
            return approval_every > 0 and n % approval_every == 0

        async def call(n: int) -> None:
            tool_call = ToolCall(run_id, f"call-{n}", "noop", {"n": n})
            if not needs_approval(n):
                await ledger.execute(tool_call, empty, policy)
                return
            approval = await store.request(
                run_id=run_id,
                tool="noop",
                args=tool_call.args,
                call_id=tool_call.call_id,
                requested_by="bench-agent",
            )
            await store.wait(approval.approval_id, 30)
            consumer = task_run_id(run_id, tool_call.call_id)
            gate = approval_gate(store, approval.approval_id, consumer, tool_call.args)
            await ledger.execute(tool_call, empty, policy, gate=gate)

        n = 0
        warm_until = time.perf_counter() + 0.3
        while time.perf_counter() < warm_until:
            await call(n)
            n += 1
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        latencies: list[float] = []
        approved: list[float] = []  # the calls that waited for a decision, also in latencies
        start = time.perf_counter()
        deadline = start + seconds
        while (began := time.perf_counter()) < deadline:
            await call(n)
            latencies.append(time.perf_counter() - began)
            if needs_approval(n):
                approved.append(latencies[-1])
            n += 1
        elapsed = time.perf_counter() - start
        await ledger.close()
        await store.close()
    figures = {"elapsed": elapsed, "latencies": latencies, "approved": approved}
    print(json.dumps(figures))


# -- the bench process -----------------------------------------------------------------------


async def spawn(env: dict[str, str], *args: str) -> Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        *args,
        cwd=ROOT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env=env,
    )


async def ready(process: Process) -> None:
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), 60)
    if line.strip() != b"ready":
        raise RuntimeError(f"a bench process did not start: {line!r}")


@asynccontextmanager
async def deciding(url: str, env: dict[str, str], interval: float) -> AsyncIterator[None]:
    """bench/approvals.py's decider approving every request, until the block ends."""
    decider = await spawn(env, "bench.approvals", "--decider", url, "--interval", str(interval))
    assert decider.stdin is not None and decider.stdout is not None
    await ready(decider)
    # Its lines (one per decision) are read and dropped, so the pipe never fills.
    drain = asyncio.create_task(decider.stdout.read())
    try:
        yield
    finally:
        decider.stdin.close()
        await asyncio.wait_for(decider.wait(), 30)
        await drain


async def level(
    url: str, env: dict[str, str], workers: int, seconds: float, approval_every: int
) -> dict[str, Any]:
    """Calls/s and latencies of `workers` processes started together."""
    args = ("--seconds", str(seconds), "--approval-every", str(approval_every))
    processes = [
        await spawn(env, "bench.scale_out", "--worker", url, *args) for _ in range(workers)
    ]
    await asyncio.gather(*(ready(p) for p in processes))
    for p in processes:
        assert p.stdin is not None
        p.stdin.write(b"go\n")
    outputs = await asyncio.gather(
        *(asyncio.wait_for(p.communicate(), seconds + 60) for p in processes)
    )
    if any(p.returncode for p in processes):
        raise RuntimeError("a worker failed")
    figures = [json.loads(out.decode().strip().splitlines()[-1]) for out, _ in outputs]
    latencies = [t for f in figures for t in f["latencies"]]
    approved = [t for f in figures for t in f["approved"]]
    ms = 1000.0
    return {
        "workers": workers,
        "calls": len(latencies),
        "calls_per_s": round(sum(len(f["latencies"]) / f["elapsed"] for f in figures), 1),
        "p50_ms": round(percentile(latencies, 0.5) * ms, 2),
        "p99_ms": round(percentile(latencies, 0.99) * ms, 2),
        "approved_calls": len(approved),
        "approved_p50_ms": round(percentile(approved, 0.5) * ms, 2) if approved else None,
    }


async def main(
    levels: list[int], seconds: float, baseline_seconds: float, approval_every: int
) -> dict[str, Any]:
    kek, reviewer_kek = os.urandom(32), os.urandom(32)
    async with bench_database() as url:
        async with await Database.connect(url, pool_size=1) as db:
            await KeyRing.open(db, LocalKek(kek), reviewer_kek=LocalKek(reviewer_kek))
            await ReviewerDirectory(db).add("bench-reviewer", by="bench")  # the decider
        # Workers never hold the reviewer KEK, even when this process's environment has one.
        inherited = {k: v for k, v in os.environ.items() if k != "SIGNOFF_REVIEWER_KEK"}
        worker_env = {
            **inherited,
            "SIGNOFF_KEK": base64.b64encode(kek).decode(),
            "PYTHONPATH": str(ROOT),
        }
        decider_env = {
            **worker_env,
            "SIGNOFF_REVIEWER_KEK": base64.b64encode(reviewer_kek).decode(),
        }
        results: list[dict[str, Any]] = []
        async with deciding(url, decider_env, 0.005):
            for workers in levels:
                raw = await raw_commit_rate(url, workers, baseline_seconds)
                figures = await level(url, worker_env, workers, seconds, approval_every)
                figures["raw_commits_per_s"] = round(raw, 1)
                figures["ratio"] = round(figures["calls_per_s"] / raw, 3)
                print(json.dumps({"benchmark": "scale_out", "unit": "calls/s", **figures}))
                results.append(figures)
    last = results[-1]
    return {
        "ours": last["calls_per_s"],
        "baseline": last["raw_commits_per_s"],
        "ratio": last["ratio"],
        "workers": last["workers"],
        "p50_ms": last["p50_ms"],
        "p99_ms": last["p99_ms"],
        "approval_every": approval_every,
        "levels": {str(r["workers"]): r["calls_per_s"] for r in results},
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--levels", default=",".join(map(str, LEVELS)), help="worker counts")
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each level's run")
    parser.add_argument("--baseline-seconds", type=float, default=2.0, help="raw commit run")
    parser.add_argument(
        "--approval-every", type=int, default=10, help="1 call in N needs an approval (0: none)"
    )
    parser.add_argument("--worker", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    configure_logging("WARNING")
    if args.worker:
        asyncio.run(worker(args.worker, args.seconds, args.approval_every))
    else:
        levels = [int(n) for n in args.levels.split(",")]
        figures = asyncio.run(
            main(levels, args.seconds, args.baseline_seconds, args.approval_every)
        )
        print(json.dumps({"benchmark": "scale_out", "unit": "calls/s", **figures}))
