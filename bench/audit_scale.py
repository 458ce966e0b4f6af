"""Audit at any size: digests, proofs and digest checks over the stored Merkle tree at 100,000
and 1,000,000 events (10,000,000 with --huge), and how each grows with the journal.

Prints one JSON object per figure as it is measured (`figure`, `events`, `value`, `unit`,
`growth`: the value over the same figure at the previous size), then a summary as its last
line: `ours` = the integration rate (events/s), `baseline` = the append rate of 8 writers
through `Journal.append` on the same server, `ratio` = ours / baseline, and
`digest_after_new_ms`, a digest after 1,000 new events on the largest journal (target < 50),
and `verify_digest_since_new_ms`, that digest checked since the one before the new events.

The big journals are written fast, as the table owner, with one INSERT ... SELECT over
generate_series per 100,000 events: each event is version 1 of a stream of its own, so its
chain hash is SHA-256 of 32 zero bytes and its canonical bytes, which the SELECT computes with
the same expressions as `signoff_write_events`. `Journal.verify` accepts them
(the quick run checks it). The database comes from SIGNOFF_DATABASE_URL / DATABASE_URL, else the
embedded server; a scratch database is created and dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import time
from typing import Any

from bench.common import Growth, bench_database, seconds_of
from bench.verify import WRITERS, fill
from ledger.audit.digest import (
    Digest,
    prove_consistency,
    prove_inclusion,
    signing_keys,
    take_digest,
    verify_digest,
)
from ledger.audit.tree import integrate
from ledger.journal import Journal, NewEvent
from ledger.keys import KeyRing, LocalKek
from ledger.log import configure_logging
from ledger.store import Database

CHUNK = 100_000
_BULK = """
INSERT INTO events (stream_id, version, type, data, actor, recorded_at, hash, login)
SELECT x.stream, 1, 'bench.recorded', x.data::json, 'bench', t.at,
       sha256(decode(repeat('00', 32), 'hex')
              || convert_to('signoff.event.v3', 'UTF8')
              || int4send(octet_length(convert_to(x.stream, 'UTF8')))
              || convert_to(x.stream, 'UTF8')
              || int4send(1) || convert_to('1', 'UTF8')
              || int4send(14) || convert_to('bench.recorded', 'UTF8')
              || int4send(5) || convert_to('bench', 'UTF8')
              || int4send(octet_length(t.at_text)) || t.at_text
              || int4send(octet_length(convert_to(x.data, 'UTF8'))) || convert_to(x.data, 'UTF8')
              || int4send(octet_length(convert_to(session_user::text, 'UTF8')))
              || convert_to(session_user::text, 'UTF8')),
       session_user::text
FROM (SELECT 'bench:' || g AS stream, '{"i":' || g || '}' AS data
      FROM generate_series($1::bigint, $2::bigint) AS g) AS x,
     (SELECT c.at, convert_to(to_char(c.at AT TIME ZONE 'UTC',
                                      'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), 'UTF8') AS at_text
      FROM (SELECT date_trunc('milliseconds', clock_timestamp()) AS at) AS c) AS t
"""


async def bulk_fill(db: Database, start: int, end: int) -> None:
    """Events `bench:<start>` .. `bench:<end - 1>`, CHUNK per transaction."""
    for first in range(start, end, CHUNK):
        last = min(first + CHUNK, end) - 1
        async with db.transaction() as conn:
            await conn.execute(_BULK, first, last)
    async with db.connection() as conn:
        await conn.execute("VACUUM ANALYZE events")


async def measure_proofs(
    db: Database, ring: KeyRing, previous: Digest | None, rng: random.Random, figures: Growth
) -> Digest:
    """Digest, proofs and digest checks at the journal's size now; return the digest."""
    keys = signing_keys(ring)
    digest = await take_digest(db, ring)
    events = digest.tree_size
    old = previous or digest

    async def digest_again() -> None:
        await take_digest(db, ring)

    async def consistency() -> None:
        await prove_consistency(db, old, digest)

    async def check_full() -> None:
        await verify_digest(db, digest, keys)

    async def check_since() -> None:
        await verify_digest(db, digest, keys, since=old)

    figures.show("digest_s", events, await seconds_of(digest_again, 3), "s")
    inclusions = []
    for _ in range(5):
        position = rng.randint(1, digest.last_position)
        started = time.perf_counter()
        await prove_inclusion(db, position, digest)
        inclusions.append(time.perf_counter() - started)
    figures.show("inclusion_proof_s", events, statistics.median(inclusions), "s")
    figures.show("consistency_proof_s", events, await seconds_of(consistency, 3), "s")
    figures.show("verify_digest_full_s", events, await seconds_of(check_full, 1), "s")
    figures.show("verify_digest_since_last_s", events, await seconds_of(check_since, 1), "s")
    return digest


async def measure(
    url: str, sizes: list[int], new: int, append_events: int, check: bool
) -> dict[str, Any]:
    figures = Growth("audit_scale", "events")
    async with await Database.connect(url, pool_size=WRITERS) as db:
        ring = await KeyRing.open(db, LocalKek(os.urandom(32)))
        journal = Journal(db)
        rng = random.Random(1)
        built, previous = 0, None
        integration_rates = []
        for size in sizes:
            await bulk_fill(db, built, size)
            built = size
            started = time.perf_counter()
            done = await integrate(db)
            elapsed = time.perf_counter() - started
            integration_rates.append(done.integrated / elapsed)
            figures.show(
                "integrate_events_per_s", done.tree_size, done.integrated / elapsed, "events/s"
            )
            previous = await measure_proofs(db, ring, previous, rng, figures)
        if check:  # the bulk events are what the journal itself would have written
            report = await journal.verify()
            if not report.ok:
                raise RuntimeError(f"bulk events do not verify: {report.first_bad}")
        for i in range(0, new, 10):
            batch = [NewEvent("bench.new", {"i": i + j}, actor="bench") for j in range(10)]
            await journal.append(f"bench-new:{i}", batch, expected_version=0)
        started = time.perf_counter()
        after = await take_digest(db, ring)
        after_new = time.perf_counter() - started
        figures.show("digest_after_new_ms", after.tree_size, after_new * 1000, "ms")
        if previous is not None:  # `verify --digest --since-digest` of the 1,000 new events
            started = time.perf_counter()
            since_check = await verify_digest(db, after, signing_keys(ring), since=previous)
            if not since_check.ok:
                raise RuntimeError(f"verify_digest since: {since_check.problems}")
            since_ms = (time.perf_counter() - started) * 1000
            figures.show("verify_digest_since_new_ms", after.tree_size, since_ms, "ms")
        append_rate = await fill(journal, append_events)
        started = time.perf_counter()
        appended = await integrate(db)
        integrate_rate = appended.integrated / (time.perf_counter() - started)
        figures.show("append_events_per_s_8_writers", appended.tree_size, append_rate, "events/s")
        figures.show(
            "integrate_events_per_s_after_writers", appended.tree_size, integrate_rate, "events/s"
        )
    return {
        "ours": round(integrate_rate, 1),
        "baseline": round(append_rate, 1),
        "ratio": round(integrate_rate / append_rate, 3),
        "bulk_integrate_events_per_s": round(max(integration_rates), 1),
        "digest_after_new_ms": round(after_new * 1000, 2),
        "new_events": new,
        "largest": sizes[-1],
    }


async def main(sizes: list[int], new: int, append_events: int, check: bool) -> dict[str, Any]:
    async with bench_database() as url:
        return await measure(url, sizes, new, append_events, check)


def _sizes(text: str) -> list[int]:
    sizes = sorted({int(part) for part in text.split(",") if part.strip()})
    if not sizes or sizes[0] < 1:
        raise argparse.ArgumentTypeError("sizes are whole numbers of events, 1 or more")
    return sizes


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--sizes", type=_sizes, default=[100_000, 1_000_000], help="journal sizes, comma-separated"
    )
    parser.add_argument("--huge", action="store_true", help="add 10,000,000 events")
    parser.add_argument("--new", type=int, default=1000, help="events before the last digest")
    parser.add_argument(
        "--append-events", type=int, default=40_000, help="events the 8 writers append"
    )
    parser.add_argument(
        "--check", action="store_true", help="also run Journal.verify over the bulk events"
    )
    args = parser.parse_args()
    configure_logging("WARNING")
    sizes = args.sizes + ([10_000_000] if args.huge else [])
    figures = asyncio.run(main(sizes, args.new, args.append_events, args.check))
    print(json.dumps({"benchmark": "audit_scale", "unit": "events/s", **figures}))
