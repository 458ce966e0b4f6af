"""Approval round trips across processes: request -> decide (in another OS process) -> wake ->
consume, with 8 concurrent flows, beside raw asyncpg single-row commits on the same server.

The decider is this module run with `--decider URL`: it polls `pending()` and approves each new
request, printing `<approval id> <time.time() right after decide() returned>` per decision. The
bench process waits with `store.wait` (woken by NOTIFY) and measures, per round trip, the full
latency and the wake delay (waiter woken minus the decider's commit time, same host clock).

Prints one JSON object as its last line. The database comes from SIGNOFF_DATABASE_URL /
DATABASE_URL, else the embedded server; a scratch database is created and dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

from approvals import ApprovalAlreadyDecided, ApprovalStore, Decision, ReviewerDirectory
from bench.common import Op, bench_database, percentile, rate, raw_commit_rate
from ledger.keys import KeyRing, LocalKek
from ledger.log import configure_logging
from ledger.store import Database

ROOT = Path(__file__).resolve().parent.parent
FLOWS = 8


# -- the decider process ---------------------------------------------------------------------


async def decider(url: str, interval: float) -> None:
    """Approve every pending request as it appears (KEKs from SIGNOFF_KEK and
    SIGNOFF_REVIEWER_KEK: the decider is the reviewer side), until stdin closes."""
    async with await Database.connect(url, pool_size=FLOWS) as db:
        store = ApprovalStore(db, await KeyRing.open(db))
        seen: set[str] = set()

        async def decide(approval_id: str) -> None:
            try:
                await store.decide(approval_id, Decision.approve(), "bench-reviewer")
            except ApprovalAlreadyDecided:
                return
            decided_at = time.time()
            sys.stdout.write(f"{approval_id} {decided_at:.6f}\n")
            sys.stdout.flush()

        stdin_closed = asyncio.create_task(asyncio.to_thread(sys.stdin.read))
        print("ready", flush=True)
        while not stdin_closed.done():
            fresh = [a.approval_id for a in await store.pending() if a.approval_id not in seen]
            seen.update(fresh)
            await asyncio.gather(*(decide(a) for a in fresh))
            if not fresh:
                await asyncio.sleep(interval)
        await store.close()


# -- the bench process -----------------------------------------------------------------------


async def main(seconds: float, baseline_seconds: float, interval: float) -> dict[str, float]:
    kek, reviewer_kek = os.urandom(32), os.urandom(32)
    async with bench_database() as url:
        baseline = await raw_commit_rate(url, FLOWS, baseline_seconds)

        db = await Database.connect(url, pool_size=FLOWS + 2)
        await KeyRing.open(db, LocalKek(kek), reviewer_kek=LocalKek(reviewer_kek))  # every key
        # The decider: a policy that names no approvers admits only listed reviewers.
        await ReviewerDirectory(db).add("bench-reviewer", by="bench")
        worker_ring = KeyRing(db, LocalKek(kek))  # this process is the worker: no reviewer KEK
        await worker_ring.refresh()
        store = ApprovalStore(db, worker_ring)
        env = {
            **os.environ,
            "SIGNOFF_KEK": base64.b64encode(kek).decode(),
            "SIGNOFF_REVIEWER_KEK": base64.b64encode(reviewer_kek).decode(),
            "PYTHONPATH": str(ROOT),
        }
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.approvals",
            "--decider",
            url,
            "--interval",
            str(interval),
            cwd=ROOT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=env,
        )
        assert child.stdin is not None and child.stdout is not None
        assert (await asyncio.wait_for(child.stdout.readline(), 60)).strip() == b"ready"
        decided_at: dict[str, float] = {}

        async def read_decisions() -> None:
            assert child.stdout is not None
            async for line in child.stdout:
                approval_id, at = line.decode().split()
                decided_at[approval_id] = float(at)

        reader = asyncio.create_task(read_decisions())
        latencies: list[float] = []
        woken: list[tuple[str, float]] = []

        def flow(i: int) -> Op:
            run_id = f"bench-run-{i}-{uuid.uuid4().hex[:6]}"

            async def op(n: int) -> None:
                started = time.perf_counter()
                approval = await store.request(
                    run_id=run_id,
                    tool="refund",
                    args={"order": f"A-{n}", "amount": n},
                    call_id=f"call-{n}",
                    requested_by="bench-agent",
                )
                decided = await store.wait(approval.approval_id, 30)
                woke = time.time()
                if not decided.status.runs_tool:
                    raise RuntimeError(f"not approved: {decided.status}")
                await store.consume(approval.approval_id, f"{run_id}:{n}")
                latencies.append(time.perf_counter() - started)
                woken.append((approval.approval_id, woke))

            return op

        await rate(FLOWS, 0.5, flow)  # warm up
        latencies.clear()
        woken.clear()
        ours = await rate(FLOWS, seconds, flow)
        child.stdin.close()
        await asyncio.wait_for(child.wait(), 30)
        await reader
        await store.close()
        await db.close()
    wakes = [woke - decided_at[a] for a, woke in woken if a in decided_at]
    ms = 1000.0
    return {
        "ours": round(ours, 1),
        "baseline": round(baseline, 1),
        "ratio": round(ours / baseline, 4),
        "round_trips": len(latencies),
        "latency_p50_ms": round(percentile(latencies, 0.5) * ms, 2),
        "latency_p99_ms": round(percentile(latencies, 0.99) * ms, 2),
        "latency_mean_ms": round(statistics.fmean(latencies) * ms, 2),
        "wake_p50_ms": round(percentile(wakes, 0.5) * ms, 2),
        "wake_p99_ms": round(percentile(wakes, 0.99) * ms, 2),
        "decider_poll_ms": interval * ms,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the approval run")
    parser.add_argument("--baseline-seconds", type=float, default=4.0, help="raw commit run")
    parser.add_argument("--interval", type=float, default=0.002, help="decider poll (s)")
    parser.add_argument("--decider", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    configure_logging("WARNING")
    if args.decider:
        asyncio.run(decider(args.decider, args.interval))
    else:
        figures = asyncio.run(main(args.seconds, args.baseline_seconds, args.interval))
        print(json.dumps({"benchmark": "approvals", "unit": "round trips/s", **figures}))
