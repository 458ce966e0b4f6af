"""Journal appends per second at 1 and 8 writers, beside raw asyncpg commits on the same server.

Run from the repository root: `python -m bench.journal_append`. Prints one JSON object as its
last line. The database comes from SIGNOFF_DATABASE_URL / DATABASE_URL, else the embedded
server; a scratch database is created and dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import uuid
from collections.abc import Callable

from bench.common import Op, bench_database, rate, raw_commit_rate
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


async def main(seconds: float) -> dict[str, float]:
    async with bench_database() as url:
        baseline_1 = await raw_commit_rate(url, 1, seconds)
        baseline_8 = await raw_commit_rate(url, 8, seconds)
        async with await Database.connect(url, pool_size=8) as db:
            journal = Journal(db)
            await rate(8, 0.5, appends(journal, 1))  # warm up
            result = {
                "baseline_1": baseline_1,
                "ours_1": await rate(1, seconds, appends(journal, 1)),
                "baseline": baseline_8,
                "ours": await rate(8, seconds, appends(journal, 1)),
                "ours_batch5_events": await rate(8, seconds, appends(journal, 5), per_op=5),
            }
    result = {k: round(v, 1) for k, v in result.items()}
    result["ratio"] = round(result["ours"] / result["baseline"], 3)
    result["ratio_1"] = round(result["ours_1"] / result["baseline_1"], 3)
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each measurement")
    args = parser.parse_args()
    figures = asyncio.run(main(args.seconds))
    print(json.dumps({"benchmark": "journal_append", "unit": "appends/s", **figures}))
