"""Dex-adapter programs the tests run as OS processes: `python -m tests.support.dex_workers ...`.

Each opens the database named on its command line with the KEK from SIGNOFF_KEK and runs what
one Dex Step or RPC does (the plain functions of `adapters.dex.logic`), as a Worker would:

- `call URL FLOW CALL EFFECT SLEEP LEASE APPROVAL`: the CallTool Step. The tool records its
  side effect in `dex_side_effects` (committed at once), prints `started`, then sleeps.
  APPROVAL is `yes` when the tool needs an approval (the test decides it first).
- `decide URL FLOW CALL APPROVAL KIND REVIEWER`: the decide RPC's store half.

Each prints one JSON line with what it came to.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from datetime import timedelta
from typing import Any

from adapters.dex import (
    DecideRequest,
    DexTool,
    ToolCallRequest,
    ToolSpec,
    call_tool,
    decide_for_flow,
)
from adapters.dex.errors import DecisionConflict
from approvals import ApprovalPolicy, ApprovalStore, DecisionKind
from ledger.calls.model import CallContext, Effect
from ledger.calls.service import ToolLedger
from ledger.keys import KeyRing
from ledger.log import configure_logging
from ledger.store import Database

REFUND_ARGS: dict[str, Any] = {"order": "A-1", "amount": 120}
APPROVAL = ApprovalPolicy(expires_in=timedelta(minutes=10))


async def call(
    url: str, flow_id: str, call_id: str, effect: str, sleep: float, lease: float, approval: str
) -> None:
    async with await Database.connect(url, pool_size=3) as db:
        ring = await KeyRing.open(db)
        store = ApprovalStore(db, ring)
        ledger = ToolLedger(db, ring, lease_seconds=lease, poll_interval=0.05)

        async def refund(args: dict[str, Any], context: CallContext) -> dict[str, Any]:
            async with db.connection() as conn:
                await conn.execute(
                    "INSERT INTO dex_side_effects (flow_id, call_id, pid, attempt, key)"
                    " VALUES ($1, $2, $3, $4, $5)",
                    flow_id,
                    call_id,
                    os.getpid(),
                    context.attempt,
                    context.idempotency_key,
                )
            print("started", flush=True)
            await asyncio.sleep(sleep)
            return {"refunded": args["amount"], "by": os.getpid()}

        tool = DexTool(
            ToolSpec("refund", Effect(effect), APPROVAL if approval == "yes" else None), refund
        )
        request = ToolCallRequest(call_id, "refund", REFUND_ARGS, turn_id="t1")
        result = await call_tool(ledger, store, flow_id, request, tool)
        await ledger.close()
        await store.close()
    print(
        json.dumps(
            {
                "status": str(result.status),
                "result": result.result,
                "error": result.error,
                "replayed": result.replayed,
                "attempts": result.attempts,
                "approval_id": result.approval_id,
            }
        ),
        flush=True,
    )


async def decide(
    url: str, flow_id: str, call_id: str, approval_id: str, kind: str, reviewer: str
) -> None:
    async with await Database.connect(url, pool_size=2) as db:
        store = ApprovalStore(db, await KeyRing.open(db))
        request = DecideRequest(approval_id, call_id, DecisionKind(kind), reviewer)
        try:
            result = await decide_for_flow(store, flow_id, request)
            out: dict[str, Any] = {"status": str(result.status), "duplicate": result.duplicate}
        except DecisionConflict as e:
            out = {"error": type(e).__name__, "recorded": e.recorded}
        await store.close()
    print(json.dumps(out), flush=True)


def main() -> None:
    configure_logging("WARNING")
    name, *args = sys.argv[1:]
    if name == "call":
        url, flow_id, call_id, effect, sleep, lease, approval = args
        asyncio.run(call(url, flow_id, call_id, effect, float(sleep), float(lease), approval))
    elif name == "decide":
        asyncio.run(decide(*args))
    else:
        raise SystemExit(f"unknown program {name!r}")


if __name__ == "__main__":
    main()
