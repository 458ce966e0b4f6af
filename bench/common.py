"""What every benchmark shares: timed loops, the raw-commit baseline, percentiles, a scratch
database. Run benchmarks from the repository root as modules: `python -m bench.NAME`."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

from ledger.log import configure_logging
from ledger.store import resolve_url
from tests.support.scratch import scratch_database

__all__ = [
    "Growth",
    "Op",
    "Rounds",
    "bench_database",
    "percentile",
    "rate",
    "raw_commit_rate",
    "seconds_of",
]

Op = Callable[[int], Awaitable[None]]


async def rate(workers: int, seconds: float, op_for: Callable[[int], Op], per_op: int = 1) -> float:
    """Operations per second (times `per_op`) of `workers` loops running for `seconds`; each
    loop gets its op from `op_for(index)` and calls it with its iteration number."""
    counts = [0] * workers
    deadline = time.perf_counter() + seconds

    async def loop(i: int) -> None:
        op = op_for(i)
        while time.perf_counter() < deadline:
            await op(counts[i])
            counts[i] += 1

    start = time.perf_counter()
    await asyncio.gather(*(loop(i) for i in range(workers)))
    return sum(counts) * per_op / (time.perf_counter() - start)


async def raw_commit_rate(url: str, writers: int, seconds: float) -> float:
    """The baseline: single-row INSERT commits per second with plain asyncpg (autocommit,
    prepared), `writers` connections, on the same server."""
    pool = await asyncpg.create_pool(url, min_size=writers, max_size=writers)
    try:
        await pool.execute(
            "CREATE TABLE IF NOT EXISTS raw_inserts (id bigserial PRIMARY KEY, data json)"
        )

        def raw(_: int) -> Op:
            async def op(n: int) -> None:
                async with pool.acquire() as conn:
                    await conn.execute("INSERT INTO raw_inserts (data) VALUES ($1)", '{"n":1}')

            return op

        await rate(writers, 0.3, raw)  # warm up
        return await rate(writers, seconds, raw)
    finally:
        await pool.close()


async def seconds_of(run: Callable[[], Awaitable[Any]], rounds: int) -> float:
    """The median wall time of `rounds` runs of `run`."""
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        await run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


class Rounds:
    """Figures measured in turn in every round, each ratio taken within its round: this
    machine's speed drifts by a fifth within minutes, and a baseline measured once would carry
    its own moment's speed into every ratio. A figure is the median over the rounds, a ratio the
    median of the rounds' own ratios."""

    def __init__(self) -> None:
        self.figures: dict[str, list[float]] = {}
        self.ratios: dict[str, list[float]] = {}

    def note(self, name: str, value: float | None) -> None:
        """This round's `name` (None: not measured, e.g. a peer that is not installed)."""
        if value is not None:
            self.figures.setdefault(name, []).append(value)

    def compare(self, name: str, ours: float, other: float | None) -> None:
        """This round's ratio `name`: ours over `other` (None: not measured)."""
        if other:
            self.ratios.setdefault(name, []).append(ours / other)

    def figure(self, name: str, digits: int = 1) -> float | None:
        values = self.figures.get(name)
        return round(statistics.median(values), digits) if values else None

    def ratio(self, name: str, digits: int) -> float | None:
        values = self.ratios.get(name)
        return round(statistics.median(values), digits) if values else None

    def spread(self, name: str, digits: int) -> list[float]:
        """Each round's ratio `name`, in the order measured."""
        return [round(r, digits) for r in self.ratios.get(name, [])]


class Growth:
    """Prints each figure as a JSON line with its growth over the same figure at the previous
    size (`size_name`: what the size counts, e.g. events)."""

    def __init__(self, benchmark: str, size_name: str) -> None:
        self.benchmark = benchmark
        self.size_name = size_name
        self.first: dict[str, float] = {}
        self.previous: dict[str, float] = {}

    def show(self, figure: str, size: int, value: float, unit: str) -> float | None:
        """Print the figure; return its growth (None at the first size)."""
        before = self.previous.get(figure)
        self.previous[figure] = value
        self.first.setdefault(figure, value)
        growth = None if not before else round(value / before, 3)
        line: dict[str, Any] = {
            "benchmark": self.benchmark,
            "figure": figure,
            self.size_name: size,
            "value": round(value, 6),
            "unit": unit,
            "growth": growth,
        }
        print(json.dumps(line), flush=True)
        return growth


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@asynccontextmanager
async def bench_database() -> AsyncIterator[str]:
    """A scratch database, migrated, on the configured server (else the embedded one)."""
    configure_logging("WARNING")
    async with scratch_database(await asyncio.to_thread(resolve_url), prefix="bench") as url:
        yield url
