"""Tool-ledger programs the tests run as OS processes: `python -m tests.support.tool_workers ...`.

Each one opens the database named on its command line with the KEK from SIGNOFF_KEK, runs one
call through `ToolLedger.execute` with a tool that records its side effect in the table
`side_effects` (committed at once, before the tool sleeps), and prints the outcome as JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from ledger.calls.model import CallContext, Effect, ToolCall, ToolPolicy
from ledger.calls.service import ToolLedger
from ledger.keys import KeyRing
from ledger.log import configure_logging
from ledger.store import Database


async def execute(
    url: str, run_id: str, call_id: str, effect: str, sleep: float, lease: float
) -> None:
    async with await Database.connect(url, pool_size=3) as db:
        ledger = ToolLedger(db, await KeyRing.open(db), lease_seconds=lease, poll_interval=0.05)

        async def tool(args: dict[str, Any], context: CallContext) -> dict[str, Any]:
            async with db.connection() as conn:
                await conn.execute(
                    "INSERT INTO side_effects (run_id, call_id, pid, attempt)"
                    " VALUES ($1, $2, $3, $4)",
                    run_id,
                    call_id,
                    os.getpid(),
                    context.attempt,
                )
            print("started", flush=True)
            await asyncio.sleep(sleep)
            return {"refunded": args["amount"], "by": os.getpid()}

        call = ToolCall(run_id, call_id, "refund", {"amount": 120})
        outcome = await ledger.execute(call, tool, ToolPolicy(Effect(effect)))
        await ledger.close()
    print(
        json.dumps(
            {
                "status": str(outcome.status),
                "result": outcome.result,
                "error": outcome.error,
                "replayed": outcome.replayed,
                "attempts": outcome.attempts,
            }
        ),
        flush=True,
    )


def main() -> None:
    configure_logging("WARNING")
    name, *args = sys.argv[1:]
    if name != "execute":
        raise SystemExit(f"unknown program {name!r}")
    url, run_id, call_id, effect, sleep, lease = args
    asyncio.run(execute(url, run_id, call_id, effect, float(sleep), float(lease)))


if __name__ == "__main__":
    main()
