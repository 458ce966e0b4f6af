"""The judgment of a call whose policy set reads the run's history, in a run with no earlier
calls and in one with 10,000: p50 / p99 latency of `runtime.judge` (the active set's head, the
run's history, the context, Cedar) for each, and their ratio.

The set is bench/policies.py's 20 policies (enforce mode), three of which read
`context.history`. The earlier calls are real ones, run through `ToolLedger.execute` by 8
callers, the tools in turn, as the ledger writes them (their rows, events and `call_tallies`);
`--other-runs` more runs of two calls each fill `call_tallies` as other runs would. The history
is kept per run, UTC hour bucket and tool, so a judgment reads at most (tools x 25) rows
whatever the run's length: `history_ratio` (p50 at 10,000 / p50 at 0) should stay near 1.0.
The judgments of both runs alternate in each of `--rounds` rounds.

Run from the repository root: `python -m bench.policy_history`. Prints a JSON line with the
plan of the history query (`EXPLAIN ANALYZE`, the run of 10,000 calls), then one JSON object as
its last line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import uuid
from typing import Any

from adapters import runtime
from adapters.runtime import ToolSpec
from approvals.policies import Outcome
from bench.common import bench_database, percentile
from bench.policies import TOOLS, allowed_call, governed, publish
from ledger.calls import CallContext, ToolCall, ToolLedger
from ledger.calls.history import _HISTORY
from ledger.calls.model import ToolPolicy
from ledger.keys import LocalKek

KEK = LocalKek(os.urandom(32))
REVIEWER_KEK = LocalKek(os.urandom(32))
SEEDERS = 8
REFUND = next(tool for tool in TOOLS if tool.name == "refund")


async def _empty(args: dict[str, Any], context: CallContext) -> None:
    return None


async def seed(ledger: ToolLedger, run_id: str, calls: int, offset: int = 0) -> None:
    """`calls` calls of `run_id` run through the ledger by `SEEDERS` callers."""
    policies = {tool.name: ToolPolicy(tool.effect) for tool in TOOLS}

    async def caller(i: int) -> None:
        for n in range(offset + i, offset + calls, SEEDERS):
            call = allowed_call(run_id, n)
            await ledger.execute(call, _empty, policies[call.tool])

    await asyncio.gather(*(caller(i) for i in range(SEEDERS)))


async def main(calls: int, other_runs: int, judges: int, rounds: int) -> dict[str, Any]:
    spec = ToolSpec(REFUND.name, REFUND.effect)
    empty_run, long_run = (f"bench-{uuid.uuid4().hex[:12]}" for _ in range(2))
    latencies: dict[str, list[float]] = {"0": [], "10k": []}
    async with bench_database() as url:
        await publish(url, KEK, REVIEWER_KEK)
        async with governed(url, KEK, SEEDERS) as worker:
            started = time.perf_counter()
            await seed(worker.ledger, long_run, calls)
            others = [f"other-{n}-{uuid.uuid4().hex[:8]}" for n in range(other_runs)]
            for first in range(0, other_runs, 64):
                batch = others[first : first + 64]
                await asyncio.gather(*(seed(worker.ledger, r, 2) for r in batch))
            seeded = time.perf_counter() - started
            async with worker.db.connection() as conn:
                await conn.execute("ANALYZE call_tallies")
                plan = [r[0] for r in await conn.fetch("EXPLAIN ANALYZE " + _HISTORY, long_run)]
            print(json.dumps({"benchmark": "policy_history", "figure": "plan", "plan": plan}))

            async def judged(run_id: str, n: int) -> float:
                call = ToolCall(run_id, f"judge-{n}", "refund", {"amount": 20, "currency": "EUR"})
                began = time.perf_counter()
                verdict = await runtime.judge(
                    worker.point, spec, call, "agent-7", args_schema=REFUND.args_schema
                )
                took = time.perf_counter() - began
                if verdict.outcome is not Outcome.ALLOW or verdict.seen is None:
                    raise AssertionError(f"the call was not judged by its history: {verdict}")
                return took

            for n in range(20):  # warm up: the set loaded, the statements prepared
                await judged(empty_run, n)
                await judged(long_run, n)
            for r in range(rounds):
                for n in range(judges):
                    latencies["0"].append(await judged(empty_run, r * judges + n))
                    latencies["10k"].append(await judged(long_run, r * judges + n))
            async with worker.db.connection() as conn:
                rows = await conn.fetchval(
                    "SELECT count(*) FROM call_tallies WHERE run_id = $1", long_run
                )
                seen = await conn.fetchval(
                    "SELECT count(*) FROM tool_calls WHERE run_id = $1", long_run
                )

    def ms(values: list[float], q: float) -> float:
        return round(percentile(values, q) * 1000, 3)

    p50_0, p50_10k = ms(latencies["0"], 0.5), ms(latencies["10k"], 0.5)
    return {
        "ours": p50_10k,
        "baseline": p50_0,
        "history_ratio": round(p50_10k / p50_0, 3),
        "p50_0_ms": p50_0,
        "p99_0_ms": ms(latencies["0"], 0.99),
        "p50_10k_ms": p50_10k,
        "p99_10k_ms": ms(latencies["10k"], 0.99),
        "earlier_calls": seen,
        "tally_rows_read": rows,
        "other_runs": other_runs,
        "index_scan": any("Index" in line for line in plan),
        "judges": judges * rounds,
        "seed_s": round(seeded, 1),
        "rounds": rounds,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=10_000, help="earlier calls of the run")
    parser.add_argument(
        "--other-runs", type=int, default=2_000, help="other runs of two calls each"
    )
    parser.add_argument("--judges", type=int, default=500, help="judgments per run and round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds")
    args = parser.parse_args()
    figures = asyncio.run(main(args.calls, args.other_runs, args.judges, args.rounds))
    print(json.dumps({"benchmark": "policy_history", "unit": "ms", **figures}))
