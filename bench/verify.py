"""`ledger verify` (Journal.verify) over 100,000 events, beside a plain asyncpg SELECT of the same
rows measured in the same run; also the signed digest over the same events.

Prints one JSON object as its last line: `ours` = `events_per_s` (verify), `baseline` (rows/s of
the plain SELECT), `ratio` = ours / baseline, and the digest's figures. The database comes from
SIGNOFF_DATABASE_URL / DATABASE_URL, else the embedded server; a scratch database is created and
dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable

import asyncpg

from bench.common import bench_database
from ledger.audit.digest import signing_keys, take_digest, verify_digest
from ledger.journal import Journal, NewEvent
from ledger.keys import KeyRing, LocalKek
from ledger.log import configure_logging
from ledger.store import Database

WRITERS = 8
BATCH = 100
PER_STREAM = 1000
# The same columns verify reads, in the order it reads them.
_SELECT = """
SELECT position, txid::text::bigint, stream_id, version, type, data::text, actor, recorded_at, hash,
       coalesce(tag_version, 1), login
FROM events ORDER BY stream_id, version
"""


async def fill(journal: Journal, events: int) -> float:
    """Append `events` events from WRITERS concurrent writers, BATCH per append; return the
    events appended per second."""
    per_writer = events // (WRITERS * BATCH)

    async def writer(worker: int) -> None:
        stream, version = "", PER_STREAM
        for call in range(per_writer):
            if version >= PER_STREAM:  # streams of 1,000 events, as a busy approval might be
                stream, version = f"bench:{uuid.uuid4().hex}", 0
            batch = [
                NewEvent(
                    "bench.recorded",
                    {"worker": worker, "call": call, "i": i, "note": "tool call recorded"},
                    actor=f"worker-{worker}",
                )
                for i in range(BATCH)
            ]
            await journal.append(stream, batch, expected_version=version)
            version += BATCH

    started = time.perf_counter()
    await asyncio.gather(*(writer(w) for w in range(WRITERS)))
    return per_writer * WRITERS * BATCH / (time.perf_counter() - started)


async def median_rate(rounds: int, count: int, run: Callable[[], Awaitable[object]]) -> float:
    """Items per second of `run` (which handles `count` items), the median of `rounds` runs."""
    rates = []
    for _ in range(rounds):
        started = time.perf_counter()
        await run()
        rates.append(count / (time.perf_counter() - started))
    return statistics.median(rates)


async def measure(url: str, events: int, rounds: int) -> dict[str, float | int]:
    async with await Database.connect(url, pool_size=WRITERS) as db:
        journal = Journal(db)
        ring = await KeyRing.open(db, LocalKek(os.urandom(32)))
        append_rate = await fill(journal, events)
        total = (await journal.verify()).events  # includes the key ring's few events
        raw = await asyncpg.connect(url)
        try:
            await raw.execute("VACUUM ANALYZE events")

            async def plain_select() -> None:
                rows = await raw.fetch(_SELECT)
                if len(rows) != total:
                    raise RuntimeError(f"read {len(rows)} rows, expected {total}")

            async def verify() -> None:
                report = await journal.verify()
                if not report.ok or report.events != total:
                    raise RuntimeError(f"verify: {report}")

            baseline = ours = 0.0
            # Interleaved rounds, so both see the same server state and caches.
            for _ in range(rounds):
                baseline = max(baseline, await median_rate(1, total, plain_select))
                ours = max(ours, await median_rate(1, total, verify))
        finally:
            await raw.close()
        digest = await take_digest(db, ring)
        digest_rate = await median_rate(rounds, total, lambda: take_digest(db, ring))
        keys = signing_keys(ring)
        check_rate = await median_rate(rounds, total, lambda: verify_digest(db, digest, keys))
    return {
        "events": total,
        "append_events_per_s": round(append_rate, 1),
        "ours": round(ours, 1),
        "baseline": round(baseline, 1),
        "ratio": round(ours / baseline, 3),
        "events_per_s": round(ours, 1),
        "digest_events_per_s": round(digest_rate, 1),
        "verify_digest_events_per_s": round(check_rate, 1),
        "digest_tree_size": digest.tree_size,
    }


async def main(events: int, rounds: int) -> dict[str, float | int]:
    async with bench_database() as url:
        return await measure(url, events, rounds)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=100_000, help="events to append")
    parser.add_argument("--rounds", type=int, default=3, help="measurements of each kind")
    args = parser.parse_args()
    configure_logging("WARNING")
    figures = asyncio.run(main(args.events, args.rounds))
    print(json.dumps({"benchmark": "verify", "unit": "events/s", **figures}))
