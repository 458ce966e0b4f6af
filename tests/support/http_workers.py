"""An agent worker the HTTP tests run as its own OS process:
`python -m tests.support.http_workers URL APPROVAL_ID RUN_ID CALL_ID SECONDS`.

It waits for the approval's decision (woken by the deciding commit's NOTIFY), then runs the
call through the tool-call ledger with the approval gate, and prints `ready` and then one JSON
object: the call's status, how many times the tool ran in this process, and who approved it.
The KEK comes from `SIGNOFF_KEK`; it holds no reviewer KEK.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from approvals import ApprovalStore, approval_gate
from ledger.calls.model import CallContext, ToolCall, ToolPolicy
from ledger.calls.service import ToolLedger
from ledger.keys import KeyRing
from ledger.log import configure_logging
from ledger.store import Database


async def wait_and_run(
    url: str, approval_id: str, run_id: str, call_id: str, seconds: float
) -> dict[str, Any]:
    async with await Database.connect(url, pool_size=3) as db:
        ring = await KeyRing.open(db, create_missing=False)
        store = ApprovalStore(db, ring)
        ledger = ToolLedger(db, ring)
        try:
            await store.get(approval_id)
            print("ready", flush=True)
            approval = await store.wait(approval_id, seconds)
            runs = 0

            async def refund(args: dict[str, Any], context: CallContext) -> dict[str, Any]:
                nonlocal runs
                runs += 1
                return {"refunded": args["amount"]}

            call = ToolCall(run_id, call_id, "refund", {"amount": 120})
            task_run = "/".join((run_id, call_id))
            outcome = await ledger.execute(
                call,
                refund,
                ToolPolicy(),
                gate=approval_gate(store, approval_id, task_run, call.args),
            )
        finally:
            await ledger.close()
            await store.close()
    return {
        "approval": str(approval.status),
        "status": str(outcome.status),
        "runs": runs,
        "result": outcome.result,
        "can_sign": ring.can_sign_decisions,
    }


def main() -> None:
    configure_logging("WARNING")
    url, approval_id, run_id, call_id, seconds = sys.argv[1:]
    result = asyncio.run(wait_and_run(url, approval_id, run_id, call_id, float(seconds)))
    print(json.dumps(result, default=str), flush=True)


if __name__ == "__main__":
    main()
