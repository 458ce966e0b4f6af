"""`python -m tests.support.seed_workers URL GRAPH THREAD RUNS_FILE [SLEEP LEASE]`: resume a paused
thread of a graph of `tests.support.seed_graphs` in this process, with nothing (the store has the
decision), and print `{"pid", "values", "paused"}` as JSON. SLEEP: refunds and payments sleep
that long (announcing "effect refund" or "effect pay" first); LEASE: the ledger's lease. The
KEK comes from SIGNOFF_KEK; URL is a worker's login."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage
from langgraph.types import Command

from ledger.log import configure_logging

from .agents import open_harness, thread
from .seed_graphs import SPECS, Runs, build


def _plain(value: Any) -> Any:
    if isinstance(value, BaseMessage):
        return {"content": value.content, "status": getattr(value, "status", None)}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


async def resume(
    url: str, graph_name: str, thread_id: str, runs_file: str, sleep: float, lease: float
) -> dict[str, Any]:
    async with open_harness(url, lease_seconds=lease) as harness:
        runs = Runs(Path(runs_file))
        graph = build(graph_name, runs, harness.signoff(SPECS), harness.saver, sleep)
        out = await graph.ainvoke(Command(resume="continue"), thread(thread_id))
        values = {k: _plain(v) for k, v in out.items() if k != "__interrupt__"}
        return {"pid": os.getpid(), "values": values, "paused": "__interrupt__" in out}


def main() -> None:
    configure_logging("WARNING")
    url, graph_name, thread_id, runs_file, *timing = sys.argv[1:]
    sleep, lease = (float(t) for t in timing) if timing else (0.0, 30.0)
    result = asyncio.run(resume(url, graph_name, thread_id, runs_file, sleep, lease))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
