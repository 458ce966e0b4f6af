"""Approval programs the tests run as separate OS processes:
`python -m tests.support.approval_workers NAME ARGS...`. The KEK comes from `SIGNOFF_KEK`; each
program prints one JSON object (the `wait` program prints `ready` first)."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from approvals import ApprovalStore
from ledger import SignoffError
from ledger.keys import KeyRing
from ledger.log import configure_logging
from ledger.store import Database


@asynccontextmanager
async def opened(url: str, poll_interval: float = 0.5) -> AsyncIterator[ApprovalStore]:
    async with await Database.connect(url, pool_size=2) as db:
        store = ApprovalStore(db, await KeyRing.open(db), poll_interval=poll_interval)
        try:
            yield store
        finally:
            await store.close()


def report(**fields: Any) -> None:
    print(json.dumps(fields, default=str), flush=True)


async def consume(url: str, approval_id: str, task_run_id: str, start_at: float) -> None:
    """Consume at wall-clock time `start_at` (so that every racer goes at once)."""
    async with opened(url) as store:
        await store.get(approval_id)  # connections open and warm before the start
        await asyncio.sleep(max(0.0, start_at - time.time()))
        try:
            approval = await store.consume(approval_id, task_run_id)
        except SignoffError as e:
            report(result="error", error=type(e).__name__, message=str(e))
            return
        decision = approval.decision.kind.value if approval.decision else None
        report(result="consumed", consumed_by=approval.consumed_by, decision=decision)


async def redeem(url: str, token: str, call: str, task_run_id: str) -> None:
    """Verify a resume token for `call` (JSON: run_id, tool, args, call_id); then consume the
    decision unless `task_run_id` is '-'."""
    fields = json.loads(call)
    async with opened(url) as store:
        try:
            approval = await store.verify_token(token, **fields)
            if task_run_id != "-":
                approval = await store.consume(approval.approval_id, task_run_id)
        except SignoffError as e:
            report(result="error", error=type(e).__name__, message=str(e))
            return
        report(result="consumed" if approval.consumed else "verified", status=approval.status)


async def wait(url: str, approval_id: str, seconds: float, poll_interval: float) -> None:
    """Wait up to `seconds`, reading the database again every `poll_interval` seconds and
    whenever notified (a poll interval longer than `seconds`: only a notification wakes it)."""
    async with opened(url, poll_interval) as store:
        await store.get(approval_id)
        print("ready", flush=True)
        started = time.monotonic()
        approval = await store.wait(approval_id, seconds)
        waited = time.monotonic() - started
        report(status=approval.status, waited=waited, decided_by=approval.decided_by)


def main() -> None:
    configure_logging("WARNING")
    name, *args = sys.argv[1:]
    if name == "consume":
        url, approval_id, task_run_id, start_at = args
        asyncio.run(consume(url, approval_id, task_run_id, float(start_at)))
    elif name == "redeem":
        url, token, call, task_run_id = args
        asyncio.run(redeem(url, token, call, task_run_id))
    elif name == "wait":
        url, approval_id, seconds, poll_interval = args
        asyncio.run(wait(url, approval_id, float(seconds), float(poll_interval)))
    else:
        raise SystemExit(f"unknown worker {name!r}")


if __name__ == "__main__":
    main()
