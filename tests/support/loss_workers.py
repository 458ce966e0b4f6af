"""A library process that keeps using its database until its stdin closes, for the tests of
what a lost database connection leaves on stderr: `python -m tests.support.loss_workers URL`
(KEK from `SIGNOFF_KEK`). It requests an approval, waits on it (LISTEN) and queries the pool
in a loop; it prints `ready` once working, `unavailable` when it first meets
`DatabaseUnavailable` and `back` when a query succeeds again. It configures no logging, as an
application that embeds the library may not."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid

from approvals import ApprovalStore
from ledger.errors import DatabaseUnavailable
from ledger.keys import KeyRing
from ledger.store import Database


def say(line: str) -> None:
    print(line, flush=True)


async def _query(db: Database) -> None:
    async with db.connection() as conn:
        await conn.fetchval("SELECT 1")


async def main(url: str) -> None:
    db = await Database.connect(url, pool_size=3)
    store = ApprovalStore(db, await KeyRing.open(db, create_missing=False), poll_interval=0.1)
    approval = await store.request(
        run_id=f"loss-{uuid.uuid4().hex[:8]}",
        tool="refund",
        args={"amount": 1},
        call_id="c1",
        requested_by="agent",
    )

    async def waiting() -> None:
        while True:
            with contextlib.suppress(DatabaseUnavailable):
                await store.wait(approval.approval_id, 600)

    waiter = asyncio.create_task(waiting())
    stdin_closed = asyncio.create_task(asyncio.to_thread(sys.stdin.read))
    say("ready")
    down = False
    while not stdin_closed.done():
        try:
            await _query(db)
            if down:
                say("back")
            down = False
        except DatabaseUnavailable:
            if not down:
                say("unavailable")
            down = True
        await asyncio.sleep(0.05)
    waiter.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await waiter
    await store.close()
    await db.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
