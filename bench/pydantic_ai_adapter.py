"""Tool calls per second of a Pydantic AI agent through Signoff (`adapters.pydantic_ai`: each
call judged by the policy decision point with no set published, recorded in the ledger, run)
beside the same agent without Signoff, in one run: a scripted `FunctionModel` asks for one call
of an empty read tool per response, `--calls` per agent run, for `--seconds` each, in
`--rounds` interleaved rounds (the figures are the medians).

Run from the repository root: `python -m bench.pydantic_ai_adapter`. Prints one JSON object as
its last line: `ours` and `plain` (calls/s), `ratio` = ours / plain, `overhead_ms` = what
Signoff adds per call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import uuid
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from adapters.pydantic_ai import PausedRuns, Signoff, ToolSpec
from approvals import ApprovalStore
from ledger.calls.model import Effect
from ledger.calls.service import ToolLedger
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database

from .common import bench_database


def build(calls: int) -> Agent[None, str]:
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = sum(1 for m in messages if isinstance(m, ModelResponse))
        if done < calls:
            return ModelResponse(parts=[ToolCallPart("lookup", {"order": f"o{done}"}, f"c{done}")])
        return ModelResponse(parts=[TextPart("done")])

    agent: Agent[None, str] = Agent(FunctionModel(reply))

    @agent.tool_plain
    async def lookup(order: str) -> str:
        """Look an order up."""
        return order

    return agent


async def rate(run: Any, calls: int, seconds: float) -> float:
    """Calls/s of `run()` (one agent run of `calls` calls), repeated for `seconds`."""
    done, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds or done == 0:
        await run()
        done += calls
    return done / elapsed


async def measure(url: str, calls: int, seconds: float, rounds: int) -> dict[str, Any]:
    agent = build(calls)
    async with await Database.connect(url) as db:
        ring = await KeyRing.open(db, LocalKek(os.urandom(32)))
        store, ledger = ApprovalStore(db, ring), ToolLedger(db, ring)
        specs = [ToolSpec("lookup", Effect.READ)]
        try:
            async with Signoff(ledger, store, PausedRuns(db, ring), specs) as signoff:

                async def governed() -> None:
                    await signoff.run(agent, "go", run_id=f"bench-{uuid.uuid4().hex}")

                async def plain() -> None:
                    await agent.run("go")

                ours, theirs = [], []
                for _ in range(rounds):
                    theirs.append(await rate(plain, calls, seconds))
                    ours.append(await rate(governed, calls, seconds))
        finally:
            await ledger.close()
            await store.close()
    o, p = statistics.median(ours), statistics.median(theirs)
    return {
        "ours": round(o, 1),
        "plain": round(p, 1),
        "ratio": round(o / p, 3),
        "overhead_ms": round((1 / o - 1 / p) * 1000, 2),
        "calls_per_run": calls,
    }


async def main_async(args: argparse.Namespace) -> None:
    async with bench_database() as url:
        figures = await measure(url, args.calls, args.seconds, args.rounds)
    print(json.dumps({"benchmark": "pydantic_ai_adapter", "unit": "calls/s", **figures}))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.pydantic_ai_adapter")
    parser.add_argument("--calls", type=int, default=10, help="tool calls per agent run")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
