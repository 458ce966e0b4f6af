"""Tool calls through the OpenAI Agents SDK adapter: an agent whose scripted model
(tests/support/openai_agents_workers.py `ScriptedCalls`, no network) asks for one call of the
tool `lookup` (a read, no approval) and then answers, run by `SignoffAgents.run` (each run a new
Signoff run id: the policy decision point judges the call, the ledger records its intent and
outcome) beside the same agent run by `Runner.run` without Signoff (the baseline), in the same
process and the same run.

Sequential runs, both paths measured in turn in each of `--rounds` rounds, each for `--seconds`:
`ours` / `baseline` are tool calls per second (one per agent run; medians over the rounds),
`ratio` the median of the rounds' own ratios, `overhead_ms` the p50 latency of an agent run
through Signoff minus the baseline's, per tool call. The adapter builds its policy decision
point over the database (no set published: the tool's spec decides, as by default). Prints one
JSON object as its last line. The database comes from SIGNOFF_DATABASE_URL / DATABASE_URL, else
the embedded server; a scratch database is created and dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

from agents import Agent, Runner, function_tool, set_tracing_disabled

from adapters.openai_agents import Finished, SignoffAgents, ToolSpec
from approvals import ApprovalStore
from bench.common import Op, Rounds, bench_database, percentile, rate
from ledger.calls import Effect, ToolLedger
from ledger.keys import KeyRing, LocalKek
from ledger.pauses import PausedRuns
from ledger.store import Database
from tests.support.openai_agents_workers import ScriptedCalls

KEK = LocalKek(os.urandom(32))
PATHS = ("baseline", "ours")


def agent() -> Agent[Any]:
    @function_tool
    async def lookup(order: str) -> str:
        """Look an order up."""
        return f"{order}: shipped"

    model = ScriptedCalls([("lookup", {"order": "A-1"}, "l-1")])
    return Agent(name="shop", tools=[lookup], model=model)


async def main(seconds: float, rounds: int) -> dict[str, Any]:
    set_tracing_disabled(True)
    async with bench_database() as url, await Database.connect(url, pool_size=4) as db:
        ring = await KeyRing.open(db, KEK)
        store = ApprovalStore(db, ring)
        ledger = ToolLedger(db, ring)
        specs = [ToolSpec("lookup", Effect.READ)]
        latencies: dict[str, list[float]] = {p: [] for p in PATHS}
        shop = agent()
        try:
            async with SignoffAgents(ledger, store, PausedRuns(db, ring), specs) as signoff:

                def op_for(path: str) -> Op:
                    async def op(n: int) -> None:
                        started = time.perf_counter()
                        if path == "ours":
                            run_id = f"bench-{uuid.uuid4().hex}"
                            done = await signoff.run(shop, "look", run_id=run_id)
                            if not isinstance(done, Finished):
                                raise RuntimeError(f"the run paused: {done}")
                        else:
                            await Runner.run(shop, "look")
                        latencies[path].append(time.perf_counter() - started)

                    return op

                def loops(path: str) -> Callable[[int], Op]:
                    return lambda _: op_for(path)

                for path in PATHS:  # warm up: imports, the pool, the policy point
                    await rate(1, 0.3, loops(path))
                    latencies[path].clear()
                figures = Rounds()
                for _ in range(rounds):
                    measured = {p: await rate(1, seconds, loops(p)) for p in PATHS}
                    for path, value in measured.items():
                        figures.note(path, value)
                    figures.compare("ratio", measured["ours"], measured["baseline"])
        finally:
            await ledger.close()
            await store.close()
    p50 = {p: percentile(latencies[p], 0.5) * 1000 for p in PATHS}
    return {
        "benchmark": "openai_agents_adapter",
        "ours": figures.figure("ours"),
        "baseline": figures.figure("baseline"),
        "ratio": figures.ratio("ratio", 3),
        "ratio_rounds": figures.spread("ratio", 3),
        "overhead_ms": round(p50["ours"] - p50["baseline"], 2),
        "latency_p50_ms": round(p50["ours"], 2),
        "baseline_latency_p50_ms": round(p50["baseline"], 2),
        "calls_per_run": 1,
        "seconds": seconds,
        "rounds": rounds,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.openai_agents_adapter")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.seconds, args.rounds))), flush=True)
