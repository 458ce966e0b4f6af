"""Journal appends per second at 1 and 8 writers, beside raw asyncpg commits on the same server.

Run from the repository root: `python -m bench.journal_append`. Prints one JSON object as its
last line. Raw commits and ours are measured in turn in each of `--rounds` rounds; each figure
is the median over the rounds, each ratio the median of the rounds' own ratios (`ratio_rounds`:
their spread). The database comes from SIGNOFF_DATABASE_URL / DATABASE_URL, else the embedded
server; a scratch database is created and dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import uuid
from collections.abc import Callable

from bench.common import Op, Rounds, bench_database, rate, raw_commit_rate
from ledger.journal import Journal, NewEvent
from ledger.store import Database


def appends(journal: Journal, batch: int) -> Callable[[int], Op]:
    """Each writer appends `batch` events at a time to a stream of its own."""

    def op_for(_: int) -> Op:
        stream = f"bench:{uuid.uuid4().hex}"
        events = [NewEvent("bench.appended", {"n": 1}, actor="bench")] * batch

        async def op(n: int) -> None:
            await journal.append(stream, events, expected_version=n * batch)

        return op

    return op_for


async def main(seconds: float, rounds: int) -> dict[str, float | list[float] | None]:
    measured = Rounds()
    async with bench_database() as url, await Database.connect(url, pool_size=8) as db:
        journal = Journal(db)
        await rate(8, 0.5, appends(journal, 1))  # warm up
        for _ in range(rounds):
            for writers, suffix in ((1, "_1"), (8, "")):
                baseline = await raw_commit_rate(url, writers, seconds)
                ours = await rate(writers, seconds, appends(journal, 1))
                measured.note(f"baseline{suffix}", baseline)
                measured.note(f"ours{suffix}", ours)
                measured.compare(f"ratio{suffix}", ours, baseline)
            batch = await rate(8, seconds, appends(journal, 5), per_op=5)
            measured.note("ours_batch5_events", batch)
    figure = measured.figure
    return {
        "baseline_1": figure("baseline_1"),
        "ours_1": figure("ours_1"),
        "baseline": figure("baseline"),
        "ours": figure("ours"),
        "ours_batch5_events": figure("ours_batch5_events"),
        "ratio": measured.ratio("ratio", 3),
        "ratio_1": measured.ratio("ratio_1", 3),
        "ratio_rounds": measured.spread("ratio", 3),
        "rounds": rounds,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=2.0, help="length of each measurement")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    args = parser.parse_args()
    figures = asyncio.run(main(args.seconds, args.rounds))
    print(json.dumps({"benchmark": "journal_append", "unit": "appends/s", **figures}))
