"""DBOS (the `bench` extra) on the tool-call workload of bench/tool_ledger: an empty step per
call, run (a) as a workflow of its own, one per call, and (b) as steps inside one running
workflow per caller. DBOS runs with its default settings, its system database a scratch
database of its own on the same server.

bench/tool_ledger runs it as a process of its own, `python -m bench.dbos_peer URL`, so that
neither system runs beside the other's threads (DBOS's background threads, idle, took about 6%
of Signoff's calls/s when both shared a process): it prints `ready` once DBOS is launched, then
answers each line `workflows|steps CALLERS SECONDS` with one line, the rate; end of input
destroys DBOS. Importing this module needs `dbos`.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from dbos import DBOS, DBOSConfig

from bench.common import Op, rate
from tests.support.scratch import scratch_database

__all__ = ["DbosPeer", "dbos_peer"]


# DBOS registers workflows and steps when they are decorated, before it is launched.
@DBOS.step()
async def empty_step(n: int) -> None:
    return None


@DBOS.workflow()
async def one_step_workflow(n: int) -> None:
    await empty_step(n)


@DBOS.workflow()
async def steps_until(deadline: float) -> int:
    """Empty steps, one after another, until `deadline` (time.time()); how many ran."""
    steps = 0
    while time.time() < deadline:
        await empty_step(steps)
        steps += 1
    return steps


class DbosPeer:
    """DBOS launched on its system database; each method measures one shape for `seconds`."""

    async def workflows(self, callers: int, seconds: float) -> float:
        """One-step workflows per second, `callers` at a time."""

        def caller(_: int) -> Op:
            async def op(n: int) -> None:
                await one_step_workflow(n)

            return op

        await rate(callers, 0.3, caller)  # warm up
        return await rate(callers, seconds, caller)

    async def steps(self, callers: int, seconds: float) -> float:
        """Steps per second inside one running workflow per caller."""
        await asyncio.gather(*(steps_until(time.time() + 0.3) for _ in range(callers)))
        start = time.perf_counter()
        counts = await asyncio.gather(*(steps_until(time.time() + seconds) for _ in range(callers)))
        return sum(counts) / (time.perf_counter() - start)


@asynccontextmanager
async def dbos_peer(url: str) -> AsyncIterator[DbosPeer]:
    """DBOS launched with a system database of its own on the server of `url`; destroyed
    afterwards (and its database dropped)."""
    async with scratch_database(url, prefix="bench_dbos") as system_url:
        config: DBOSConfig = {
            "name": "signoff-bench",
            "system_database_url": system_url,
            "log_level": "WARNING",
        }
        DBOS(config=config)
        await asyncio.to_thread(DBOS.launch)
        try:
            yield DbosPeer()
        finally:
            await asyncio.to_thread(DBOS.destroy)


async def serve(url: str) -> None:
    """Launch DBOS beside the server of `url` and measure what each line of stdin asks."""
    # Replies on the original stdout; anything else written there (DBOS's own output) goes to
    # stderr instead, so it cannot be read as a reply.
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    loop = asyncio.get_running_loop()
    async with dbos_peer(url) as peer:
        print("ready", file=replies)
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            shape, callers, seconds = line.split()
            measure = {"workflows": peer.workflows, "steps": peer.steps}[shape]
            print(await measure(int(callers), float(seconds)), file=replies)


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1]))
