"""The cost of signed decisions, in this process: signing one (the reviewer side), and checking an
approval's stream before consuming it (the worker: request MAC, decision signature, consumption
MAC, the policy re-applied), beside the resume-token MAC (`sign_token`, an HMAC over a similar
body) measured in the same process as the baseline.

Run from the repository root: `python -m bench.decisions`. Prints one JSON line per figure. The
database (for the key ring only) comes from SIGNOFF_DATABASE_URL / DATABASE_URL, else the
embedded server; a scratch database is created and dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from approvals import ApprovalPolicy, ApprovalStore, Decision, ReviewerDirectory
from approvals.integrity import approval_problems, sign_review
from approvals.model import DecisionKind, Review
from approvals.projection import stream_of
from approvals.tokens import sign_token
from bench.common import bench_database
from ledger.journal import Journal
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database

LEADS = ApprovalPolicy(approvers=frozenset({"group:leads"}))


async def per_second(seconds: float, op: Callable[[], Awaitable[object] | object]) -> float:
    """Calls per second of `op` (awaited when it returns an awaitable) for `seconds`."""
    count, deadline = 0, time.perf_counter() + seconds
    start = time.perf_counter()
    while time.perf_counter() < deadline:
        result = op()
        if isinstance(result, Awaitable):
            await result
        count += 1
    return count / (time.perf_counter() - start)


async def main(seconds: float) -> list[dict[str, object]]:
    async with bench_database() as url, await Database.connect(url, pool_size=2) as db:
        kek, reviewer_kek = LocalKek(os.urandom(32)), LocalKek(os.urandom(32))
        ring = await KeyRing.open(db, kek, reviewer_kek=reviewer_kek)
        worker = KeyRing(db, kek)  # verifies with the public key only
        await worker.refresh()
        store = ApprovalStore(db, ring)
        approval = await store.request(
            run_id="bench-run",
            tool="refund",
            args={"order": "A-1", "amount": 120},
            call_id="c1",
            requested_by="agent",
            policy=LEADS,
        )
        # A reviewer's groups are the reviewer directory's, never the caller's.
        await ReviewerDirectory(db).add("lead", ["leads"], by="bench")
        await store.decide(approval.approval_id, Decision.approve(), "lead")
        await store.consume(approval.approval_id, "bench-run/c1")
        events = await Journal(db).read_stream(stream_of(approval.approval_id))
        assert await approval_problems(worker, events) == []
        review = Review("lead", DecisionKind.APPROVE, datetime.now(UTC), groups=("leads",))

        def token() -> str:
            return sign_token(ring, approval.approval_id, approval.binding, "approved")

        def sign() -> Review:
            return sign_review(ring, approval.binding, approval.approval_id, review)

        async def check() -> None:
            await approval_problems(worker, events)

        await per_second(0.3, token)  # warm up
        baseline = await per_second(seconds, token)
        signed = await per_second(seconds, sign)
        checked = await per_second(seconds, check)
        await store.close()
    us = 1e6
    return [
        {
            "benchmark": "decisions",
            "figure": "sign a decision (reviewer side)",
            "unit": "ops/s",
            "ours": round(signed, 1),
            "baseline": round(baseline, 1),
            "ratio": round(signed / baseline, 4),
            "ours_us": round(us / signed, 1),
            "baseline_us": round(us / baseline, 1),
        },
        {
            "benchmark": "decisions",
            "figure": "check a decided and consumed approval stream (worker side)",
            "unit": "ops/s",
            "ours": round(checked, 1),
            "baseline": round(baseline, 1),
            "ratio": round(checked / baseline, 4),
            "ours_us": round(us / checked, 1),
            "baseline_us": round(us / baseline, 1),
            "events": len(events),
        },
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each measurement")
    args = parser.parse_args()
    for line in asyncio.run(main(args.seconds)):
        print(json.dumps(line))
