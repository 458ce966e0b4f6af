"""Journal appends per second at 1 and 8 writers, beside raw asyncpg commits on the same server.

Prints one JSON object as its last line. The database comes from SIGNOFF_DATABASE_URL /
DATABASE_URL, else the embedded server; a scratch database is created and dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable

import asyncpg

from ledger import Database, Journal, NewEvent, resolve_url
from ledger.log import configure_logging
from ledger.scratch import scratch_database

Op = Callable[[int], Awaitable[None]]


async def rate(writers: int, seconds: float, op_for: Callable[[int], Op], per_op: int = 1) -> float:
    """Operations per second (times `per_op`) of `writers` loops running for `seconds`."""
    counts = [0] * writers
    deadline = time.perf_counter() + seconds

    async def loop(i: int) -> None:
        op = op_for(i)
        while time.perf_counter() < deadline:
            await op(counts[i])
            counts[i] += 1

    start = time.perf_counter()
    await asyncio.gather(*(loop(i) for i in range(writers)))
    return sum(counts) * per_op / (time.perf_counter() - start)


async def main(seconds: float) -> dict[str, float]:
    async with scratch_database(await asyncio.to_thread(resolve_url), prefix="bench") as url:
        pool = await asyncpg.create_pool(url, min_size=8, max_size=8)
        await pool.execute(
            "CREATE TABLE raw_inserts (id bigserial PRIMARY KEY, stream text, data json)"
        )

        def raw(_: int) -> Op:
            async def op(n: int) -> None:
                async with pool.acquire() as conn:
                    await conn.execute(
                        "INSERT INTO raw_inserts (stream, data) VALUES ($1, $2)", "s", '{"n":1}'
                    )

            return op

        db = await Database.connect(url, pool_size=8)
        journal = Journal(db)

        def appends(batch: int) -> Callable[[int], Op]:
            def op_for(_: int) -> Op:
                stream = f"bench:{uuid.uuid4().hex}"
                events = [NewEvent("bench.appended", {"n": 1}, actor="bench")] * batch

                async def op(n: int) -> None:
                    await journal.append(stream, events, expected_version=n * batch)

                return op

            return op_for

        await rate(8, 0.5, raw)  # warm both paths up
        await rate(8, 0.5, appends(1))
        result = {
            "baseline_1": await rate(1, seconds, raw),
            "ours_1": await rate(1, seconds, appends(1)),
            "baseline": await rate(8, seconds, raw),
            "ours": await rate(8, seconds, appends(1)),
            "ours_batch5_events": await rate(8, seconds, appends(5), per_op=5),
        }
        await db.close()
        await pool.close()
    result = {k: round(v, 1) for k, v in result.items()}
    result["ratio"] = round(result["ours"] / result["baseline"], 3)
    result["ratio_1"] = round(result["ours_1"] / result["baseline_1"], 3)
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each measurement")
    args = parser.parse_args()
    configure_logging("WARNING")
    figures = asyncio.run(main(args.seconds))
    print(json.dumps({"benchmark": "journal_append", "unit": "appends/s", **figures}))
