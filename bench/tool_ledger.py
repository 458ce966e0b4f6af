"""Tool calls per second through `ToolLedger.execute` (intent + outcome, no approval, an empty
tool) at 1 and 8 concurrent callers, beside raw asyncpg single-row commits and two peers on the
same server: agent-ledger (its `EffectLedger` on `PostgresStore`), and DBOS with an empty step
per call, run as a one-step workflow per call and as steps inside one running workflow
(bench/dbos_peer.py, in a process of its own; DBOS's system database is a scratch database of
its own).

Run from the repository root: `python -m bench.tool_ledger` (the peers come with the `bench`
extra; without one its figures are null). Prints one JSON object as its last line. The headline
`ratio` is calls/s at 8 callers over raw commits/s (target: >= 0.33; a call alone is two commits,
intent and outcome, which concurrent calls share: group commit); `peer_ratio` is ours over
agent-ledger's at 8 callers (target: >= 2);
`dbos_workflow_ratio_1` / `_8` are ours over DBOS one-step workflows at 1 and 8 callers (target:
>= 4 at 1), `dbos_step_ratio_1` / `_8` ours over DBOS steps inside a running workflow.

Policies: `policy_set` is calls/s through `runtime.judge` + `runtime.run` (the path every adapter
takes) with a `PolicyPoint` under a published 20-policy Cedar set in enforce mode that allows
every call (bench/policies.py: refund tiers, per-tool permits, forbids, limits on the run's
history and the time of day), in a scratch database of its own (a published set governs every
call of its database); `policy_none` the same path and point with no set published (the tool's
own rule decides). `policy_ratio` = set / none at 8 callers (target: >= 0.9), `policy_ratio_1`
at 1.

Tracing: `traced` is `ours` with the OpenTelemetry SDK installed (every span sampled, a batch
processor, an exporter that drops the spans: bench/tracing.py), measured in the same rounds;
`tracing_ratio` = traced / ours at 8 callers (target: >= 0.9), `tracing_ratio_1` at 1. With no
SDK installed the instrumentation is the API's no-op: `noop_instrumentation_us` is its cost per
call, and `noop_share_1` that cost as a share of a call's time at 1 caller.

Every figure (raw commits, ours, agent-ledger, DBOS) is measured in each of `--rounds`
interleaved rounds, so a slow spell of the machine hits them alike; each figure is the median
over the rounds, each ratio the median of the rounds' own ratios (`ratio_rounds` and
`peer_ratio_rounds` show the spread). DBOS stays launched through all rounds, in its own
process, so neither system's figures include the other's threads.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from bench.common import Op, Rounds, bench_database, rate, raw_commit_rate
from bench.policies import allowed_call, governed, publish
from bench.tracing import installed
from ledger.calls.model import CallContext, Effect, ToolCall, ToolPolicy
from ledger.calls.service import ToolLedger
from ledger.calls.tracing import tool_span
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.telemetry import Attr, tool_calls

CALLERS = 8
KEK = LocalKek(os.urandom(32))
REVIEWER_KEK = LocalKek(os.urandom(32))


async def ours(url: str, callers: int, seconds: float) -> float:
    async with await Database.connect(url, pool_size=callers) as db:
        ledger = ToolLedger(db, await KeyRing.open(db, KEK))
        policy = ToolPolicy(Effect.SINGLE_ATTEMPT)

        async def empty(args: dict[str, Any], context: CallContext) -> None:
            return None

        def caller(_: int) -> Op:
            run_id = f"bench-{uuid.uuid4().hex[:12]}"

            async def op(n: int) -> None:
                await ledger.execute(ToolCall(run_id, f"call-{n}", "noop", {"n": n}), empty, policy)

            return op

        await rate(callers, 0.3, caller)  # warm up
        calls = await rate(callers, seconds, caller)
        await ledger.close()
    return calls


def noop_instrumentation_seconds(repeat: int = 20_000) -> float:
    """What a call's instrumentation costs with no SDK installed (the API's no-op tracer and
    meter): the span the ledger opens and closes and the count it adds, per call."""
    call = ToolCall("bench-run", "call-1", "noop", {})
    policy = ToolPolicy(Effect.SINGLE_ATTEMPT)
    counted: dict[str, str | bool] = {
        Attr.TOOL_NAME: "noop",
        Attr.CALL_STATUS: "succeeded",
        Attr.CALL_REPLAYED: False,
    }
    started = time.perf_counter()
    for _ in range(repeat):
        with tool_span(call, policy, None) as span:
            tool_calls.add(1, counted)
            span.is_recording()
    return (time.perf_counter() - started) / repeat


async def policy_calls(url: str, callers: int, seconds: float) -> float:
    """Calls/s judged by a `PolicyPoint` and run through `runtime.run`, under whatever set the
    database of `url` has published (none: the tool's own rule)."""
    async with governed(url, KEK, callers) as worker:

        def caller(_: int) -> Op:
            run_id = f"bench-{uuid.uuid4().hex[:12]}"

            async def op(n: int) -> None:
                await worker.call(allowed_call(run_id, n))

            return op

        await rate(callers, 0.3, caller)  # warm up: the set loaded, the tools registered
        return await rate(callers, seconds, caller)


async def peer(url: str, callers: int, seconds: float) -> float | None:
    """agent-ledger's calls/s, or None when it is not installed (the `bench` extra)."""
    try:
        from agent_ledger import EffectLedger, EffectLedgerOptions
        from agent_ledger import ToolCall as PeerCall
        from agent_ledger.stores.postgres import SCHEMA_SQL, PostgresStore
        from psycopg.rows import dict_row
        from psycopg_pool import AsyncConnectionPool
    except ImportError:
        return None
    kwargs = {"autocommit": True, "row_factory": dict_row}
    pool: Any = AsyncConnectionPool(
        url, min_size=callers, max_size=callers, kwargs=kwargs, open=False
    )
    async with pool:
        async with pool.connection() as conn:
            await conn.execute(SCHEMA_SQL)
        ledger: Any = EffectLedger(EffectLedgerOptions(store=PostgresStore(pool)))

        async def empty(effect: Any) -> None:
            return None

        def caller(_: int) -> Op:
            workflow = f"bench-{uuid.uuid4().hex[:12]}"

            async def op(n: int) -> None:
                call = PeerCall(workflow_id=workflow, tool="noop", args={"n": n}, call_id=f"c{n}")
                await ledger.run(call, empty)

            return op

        await rate(callers, 0.3, caller)
        return await rate(callers, seconds, caller)


class DbosProcess:
    """DBOS measured in a process of its own (bench/dbos_peer), one request at a time."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    async def workflows(self, callers: int, seconds: float) -> float:
        return await self._measure("workflows", callers, seconds)

    async def steps(self, callers: int, seconds: float) -> float:
        return await self._measure("steps", callers, seconds)

    async def _measure(self, shape: str, callers: int, seconds: float) -> float:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{shape} {callers} {seconds}\n".encode())
        await self.process.stdin.drain()
        return float(await self.answer())

    async def answer(self) -> str:
        """The process's next line (`ready`, or a rate)."""
        assert self.process.stdout is not None
        line = await self.process.stdout.readline()
        if not line:
            assert self.process.stderr is not None
            said = (await self.process.stderr.read()).decode(errors="replace")
            raise RuntimeError(f"the DBOS process ended: {said[-2000:]}")
        return line.decode().strip()


@asynccontextmanager
async def dbos(url: str) -> AsyncIterator[DbosProcess | None]:
    """DBOS launched in a process of its own beside the server of `url`, or None when it is
    not installed (the `bench` extra)."""
    if importlib.util.find_spec("dbos") is None:
        yield None
        return
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.dbos_peer",
        url,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    peer = DbosProcess(process)
    try:
        if await peer.answer() != "ready":
            raise RuntimeError("the DBOS process did not start")
        yield peer
    finally:
        if process.returncode is None:
            assert process.stdin is not None
            process.stdin.close()  # end of input: it destroys DBOS and drops its database
            try:
                await asyncio.wait_for(process.wait(), 60)
            except TimeoutError:
                process.kill()
                await process.wait()


async def main(seconds: float, rounds: int) -> dict[str, Any]:
    levels = (1, CALLERS)
    measured = Rounds()
    tracing = installed()
    idle = noop_instrumentation_seconds()
    async with bench_database() as url, bench_database() as ruled, dbos(url) as peer_dbos:
        await publish(ruled, KEK, REVIEWER_KEK)
        for _ in range(rounds):
            for n in levels:
                suffix = "" if n == CALLERS else f"_{n}"
                baseline = await raw_commit_rate(url, n, seconds)
                calls = await ours(url, n, seconds)
                with tracing.tracing():
                    traced = await ours(url, n, seconds)
                measured.note(f"baseline{suffix}", baseline)
                measured.note(f"ours{suffix}", calls)
                measured.compare(f"ratio{suffix}", calls, baseline)
                measured.note(f"traced{suffix}", traced)
                measured.compare(f"tracing_ratio{suffix}", traced, calls)
                unruled = await policy_calls(url, n, seconds)
                under_set = await policy_calls(ruled, n, seconds)
                measured.note(f"policy_none{suffix}", unruled)
                measured.note(f"policy_set{suffix}", under_set)
                measured.compare(f"policy_ratio{suffix}", under_set, unruled)
                if n == CALLERS:
                    agent_ledger = await peer(url, n, seconds)
                    measured.note("peer", agent_ledger)
                    measured.compare("peer_ratio", calls, agent_ledger)
                if peer_dbos is not None:
                    workflows = await peer_dbos.workflows(n, seconds)
                    steps = await peer_dbos.steps(n, seconds)
                    measured.note(f"dbos_workflow_{n}", workflows)
                    measured.note(f"dbos_step_{n}", steps)
                    measured.compare(f"dbos_workflow_ratio_{n}", calls, workflows)
                    measured.compare(f"dbos_step_ratio_{n}", calls, steps)
    figure, ratio = measured.figure, measured.ratio
    ours_1 = figure("ours_1")
    return {
        "ours": figure("ours"),
        "baseline": figure("baseline"),
        "ratio": ratio("ratio", 3),
        "target_ratio": 0.33,
        "ours_1": figure("ours_1"),
        "baseline_1": figure("baseline_1"),
        "ratio_1": ratio("ratio_1", 3),
        "policy_none": figure("policy_none"),
        "policy_set": figure("policy_set"),
        "policy_ratio": ratio("policy_ratio", 3),
        "target_policy_ratio": 0.9,
        "policy_none_1": figure("policy_none_1"),
        "policy_set_1": figure("policy_set_1"),
        "policy_ratio_1": ratio("policy_ratio_1", 3),
        "traced": figure("traced"),
        "tracing_ratio": ratio("tracing_ratio", 3),
        "target_tracing_ratio": 0.9,
        "traced_1": figure("traced_1"),
        "tracing_ratio_1": ratio("tracing_ratio_1", 3),
        "noop_instrumentation_us": round(idle * 1e6, 2),
        "noop_share_1": None if ours_1 is None else round(idle * ours_1, 4),
        "tracing_ratio_rounds": measured.spread("tracing_ratio", 3),
        "peer": figure("peer"),
        "peer_ratio": ratio("peer_ratio", 2),
        **{f"dbos_workflow_{n}": figure(f"dbos_workflow_{n}") for n in levels},
        **{f"dbos_workflow_ratio_{n}": ratio(f"dbos_workflow_ratio_{n}", 2) for n in levels},
        **{f"dbos_step_{n}": figure(f"dbos_step_{n}") for n in levels},
        **{f"dbos_step_ratio_{n}": ratio(f"dbos_step_ratio_{n}", 2) for n in levels},
        "ratio_rounds": measured.spread("ratio", 3),
        "peer_ratio_rounds": measured.spread("peer_ratio", 2),
        "policy_ratio_rounds": measured.spread("policy_ratio", 3),
        "rounds": rounds,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each measurement")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (ours, DBOS)")
    args = parser.parse_args()
    figures = asyncio.run(main(args.seconds, args.rounds))
    print(json.dumps({"benchmark": "tool_ledger", "unit": "calls/s", **figures}))
