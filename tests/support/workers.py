"""Programs the tests run as separate OS processes:
`python -m tests.support.workers NAME ARGS...`."""

from __future__ import annotations

import asyncio
import json
import random
import sys

from ledger import VersionConflict
from ledger.journal import Journal, NewEvent
from ledger.log import configure_logging
from ledger.store import Database


async def append_many(url: str, worker: int, count: int, streams: int) -> None:
    """Append `count` events to random shared streams, each in a transaction held open for a
    random few milliseconds so commits finish out of position order. Print the committed
    positions as JSON."""
    committed: list[int] = []
    async with await Database.connect(url, pool_size=2) as db:
        journal = Journal(db)
        rng = random.Random(worker)
        while len(committed) < count:
            stream = f"tail:{rng.randrange(streams)}"
            version = await journal.stream_version(stream)
            try:
                async with db.transaction() as conn:
                    appended = await journal.append(
                        stream,
                        [NewEvent("tail.appended", {"worker": worker}, actor=f"worker-{worker}")],
                        expected_version=version,
                        connection=conn,
                    )
                    await asyncio.sleep(rng.random() * 0.004)
            except VersionConflict:
                continue
            committed.extend(appended.positions)
    print(json.dumps(committed))


def main() -> None:
    configure_logging("WARNING")
    name, *args = sys.argv[1:]
    if name == "append-many":
        url, worker, count, streams = args
        asyncio.run(append_many(url, int(worker), int(count), int(streams)))
    elif name in ("review", "checkpoint-loop"):
        from . import checkpoint_workers  # imported here: LangGraph takes a second to import

        checkpoint_workers.run(name, args)
    else:
        raise SystemExit(f"unknown worker {name!r}")


if __name__ == "__main__":
    main()
