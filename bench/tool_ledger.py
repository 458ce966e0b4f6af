"""Tool calls per second through `ToolLedger.execute` (intent + outcome, no approval, an empty
tool) at 1 and 8 concurrent callers, beside raw asyncpg single-row commits and the closest
published peer, agent-ledger (its `EffectLedger` on `PostgresStore`), on the same server.

Run from the repository root: `python -m bench.tool_ledger` (the peer comes with the `bench`
extra; without it `peer` is null). Prints one JSON object as its last line. The headline `ratio`
is calls/s at 8 callers over raw commits/s (target: >= 0.2, that is 0.4 x raw / 2 commits);
`peer_ratio` is ours over agent-ledger's at 8 callers (target: >= 1).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import uuid
from typing import Any

from bench.common import Op, bench_database, rate, raw_commit_rate
from ledger.calls.model import CallContext, Effect, ToolCall, ToolPolicy
from ledger.calls.service import ToolLedger
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database

CALLERS = 8
KEK = LocalKek(os.urandom(32))


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


async def main(seconds: float) -> dict[str, Any]:
    async with bench_database() as url:
        baseline_1 = await raw_commit_rate(url, 1, seconds)
        baseline = await raw_commit_rate(url, CALLERS, seconds)
        ours_1 = await ours(url, 1, seconds)
        ours_8 = await ours(url, CALLERS, seconds)
        peer_8 = await peer(url, CALLERS, seconds)
    result: dict[str, Any] = {
        "ours": round(ours_8, 1),
        "baseline": round(baseline, 1),
        "ratio": round(ours_8 / baseline, 3),
        "target_ratio": 0.2,
        "ours_1": round(ours_1, 1),
        "baseline_1": round(baseline_1, 1),
        "ratio_1": round(ours_1 / baseline_1, 3),
        "peer": None if peer_8 is None else round(peer_8, 1),
        "peer_ratio": None if peer_8 is None else round(ours_8 / peer_8, 2),
    }
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each measurement")
    args = parser.parse_args()
    figures = asyncio.run(main(args.seconds))
    print(json.dumps({"benchmark": "tool_ledger", "unit": "calls/s", **figures}))
