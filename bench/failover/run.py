"""The two runs of the harness: synchronous replication (every invariant must hold across two
failovers) and asynchronous (a failover that loses commits, and what Signoff then does)."""

from __future__ import annotations

from typing import Any

from .checks import stderr_problems
from .cluster import cluster
from .harness import Options, final_checks, rig, run_rounds

__all__ = ["run_async", "run_sync"]


async def run_sync(
    rounds: int = 2, workers: int = 2, steady: float = 8.0, *, keep: bool = False
) -> list[dict[str, Any]]:
    options = Options(rounds=rounds, workers=workers, steady=steady)
    with cluster(synchronous=True, keep=keep) as made:
        out = made.root.parent / "out"
        out.mkdir()
        async with rig(made, out, options) as r:
            lines, pre = await run_rounds(r, options)
        checks = await final_checks(r, pre)
    problems = checks.pop("problems") + stderr_problems(r.said)
    lines = [{"mode": "sync", **line} for line in lines]
    if keep:
        checks["folder"] = str(made.root.parent)
    return [*lines, {"mode": "sync", "checks": checks, "problems": problems, "ok": not problems}]


async def run_async(workers: int = 2, *, keep: bool = False) -> list[dict[str, Any]]:
    from .lost import lost_commits  # the async run's own steps

    return await lost_commits(workers, keep=keep)
