"""Cost as tables grow: `ledger calls --run R` (find_calls), `approvals list --status pending`
(ApprovalStore.find), a call's story (call_story) and `ToolLedger.execute` of a new call, timed
at 10,000 and 1,000,000 rows in `tool_calls` and in `approvals`. Each should grow less than 2x
(indexes, no scans).

The rows are written fast, as the table owner, with INSERT ... SELECT over generate_series per
100,000 rows, each a copy of a template made through the library (a finished call; a pending
approval, and a decided and consumed one) under new ids: 100 calls per run, 1 approval in 100
still pending. Each bulk call's stream is a bulk event of bench/audit_scale.py's (one event per
call, valid in the hash chain), so the journal grows with the table; bulk approvals have no
events of their own. The copies keep the template's digests, bindings and sealed values, which
name the template: they are volume for the queries timed here, not calls or approvals one could
reveal, decide or check.

Prints one JSON object per figure and size (`figure`, `rows`, `value` in ms, `growth`: the
value over the same figure at the previous size), then a summary as its last line: `ours` =
calls/s of `execute` (one caller) at the largest size, `growth` per figure from the smallest
size to the largest, and `target_growth` (2). The database comes from SIGNOFF_DATABASE_URL /
DATABASE_URL, else the embedded server; a scratch database is created and dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
from typing import Any

from adapters.runtime.spec import task_run_id
from approvals import ApprovalStatus, ApprovalStore, Decision, ReviewerDirectory, approval_gate
from bench.audit_scale import CHUNK, bulk_fill
from bench.common import Growth, bench_database, seconds_of
from ledger.audit.queries import CallFilter, call_story, find_calls
from ledger.calls.model import CallContext, Effect, ToolCall, ToolPolicy
from ledger.calls.service import ToolLedger
from ledger.keys import KeyRing, LocalKek
from ledger.log import configure_logging
from ledger.store import Database

CALLS_PER_RUN = 100
PENDING_EVERY = 100
TEMPLATE_RUN = "bench-template"
POLICY = ToolPolicy(Effect.SINGLE_ATTEMPT)

# Bulk call g: run `bench-run-<g / 100>`, call `call-<g>`, its stream `bench:<g>` (the event
# bulk_fill writes), started g microseconds after the template.
_BULK_CALLS = """
INSERT INTO tool_calls (run_id, call_id, tool, effect, once_per_run, request_digest,
    args_digest, args_sealed, idempotency_key, approval_id, status, attempts, worker_id,
    lease_until, result_digest, result_sealed, resolved_by, started_at, finished_at, waiters,
    version, approved_by, approval_stream, stream_id)
SELECT 'bench-run-' || (g / 100), 'call-' || g, t.tool, t.effect, t.once_per_run,
    t.request_digest, t.args_digest, t.args_sealed, 'bench-run-' || (g / 100) || '/0/call-' || g,
    t.approval_id, t.status, t.attempts, t.worker_id, t.lease_until, t.result_digest,
    t.result_sealed, t.resolved_by, t.started_at + g * interval '1 microsecond',
    t.finished_at + g * interval '1 microsecond', t.waiters, t.version, t.approved_by,
    t.approval_stream, 'bench:' || g
FROM tool_calls AS t, generate_series($2::bigint, $3::bigint) AS g
WHERE t.run_id = $1 AND t.call_id = 'template'
"""

# Bulk approval g: a copy of the pending template when g is a multiple of 100, else of the
# consumed one.
_BULK_APPROVALS = """
INSERT INTO approvals (approval_id, run_id, thread_id, tool, kind, call_id, args_digest,
    binding, requested_by, policy, status, reviews, decided_at, expires_at, consumed_by,
    consumed_at, thread_config, requested_at, version, decided_by)
SELECT 'apr-bench-' || g, 'bench-run-' || (g / 100), a.thread_id, a.tool, a.kind,
    'call-' || g, a.args_digest, a.binding, a.requested_by, a.policy, a.status, a.reviews,
    a.decided_at, a.expires_at, a.consumed_by, a.consumed_at, a.thread_config,
    a.requested_at + g * interval '1 microsecond', a.version, a.decided_by
FROM approvals AS a, generate_series($3::bigint, $4::bigint) AS g
WHERE a.approval_id = CASE WHEN g % 100 = 0 THEN $1 ELSE $2 END
"""


async def empty(args: dict[str, Any], context: CallContext) -> None:
    return None


async def templates(ledger: ToolLedger, store: ApprovalStore) -> tuple[str, str]:
    """A finished call, and two approvals made through the library: (pending, consumed)."""
    await ledger.execute(ToolCall(TEMPLATE_RUN, "template", "noop", {"n": 0}), empty, POLICY)
    pending = await store.request(
        run_id=TEMPLATE_RUN, tool="noop", args={"n": 1}, call_id="pending", requested_by="bench"
    )
    used = await store.request(
        run_id=TEMPLATE_RUN, tool="noop", args={"n": 2}, call_id="gated", requested_by="bench"
    )
    await store.decide(used.approval_id, Decision.approve(), "bench-reviewer")
    gate = approval_gate(store, used.approval_id, task_run_id(TEMPLATE_RUN, "gated"), {"n": 2})
    await ledger.execute(
        ToolCall(TEMPLATE_RUN, "gated", "noop", {"n": 2}), empty, POLICY, gate=gate
    )
    return pending.approval_id, used.approval_id


async def bulk_rows(db: Database, start: int, end: int, pending: str, consumed: str) -> None:
    """Calls, approvals and the calls' events numbered `start` .. `end - 1`."""
    await bulk_fill(db, start, end)
    for first in range(start, end, CHUNK):
        last = min(first + CHUNK, end) - 1
        async with db.transaction() as conn:
            await conn.execute(_BULK_CALLS, TEMPLATE_RUN, first, last)
            await conn.execute(_BULK_APPROVALS, pending, consumed, first, last)
    async with db.connection() as conn:
        for table in ("tool_calls", "approvals"):  # the figures are at these sizes, or fail
            await conn.execute(f"VACUUM ANALYZE {table}")
            if (rows := await conn.fetchval(f"SELECT count(*) FROM {table}")) < end:
                raise RuntimeError(f"{table} holds {rows} rows, not {end}")


async def measure(
    db: Database, ledger: ToolLedger, store: ApprovalStore, size: int, rounds: int, growth: Growth
) -> None:
    """Each figure's median time (ms) at `size` rows, shown with its growth."""
    rng = random.Random(size)
    bulk = [rng.randrange(size) for _ in range(rounds)]

    def each(op: Any) -> Any:
        picks = iter(bulk)

        async def run() -> None:
            await op(next(picks))

        return run

    async def calls_of_run(g: int) -> None:
        found = await find_calls(db, CallFilter(run_id=f"bench-run-{g // CALLS_PER_RUN}"))
        assert found, "the bulk run has calls"

    async def pending_list(_: int) -> None:
        assert await store.find(status=ApprovalStatus.PENDING, limit=100)

    async def story(g: int) -> None:
        await call_story(db, f"bench-run-{g // CALLS_PER_RUN}", f"call-{g}")

    async def execute(g: int) -> None:
        call = ToolCall(f"bench-new-{size}", f"call-{g}-{rng.getrandbits(32)}", "noop", {"g": g})
        await ledger.execute(call, empty, POLICY)

    figures: dict[str, Any] = {
        "calls_of_run_ms": calls_of_run,
        "pending_list_ms": pending_list,
        "story_ms": story,
        "execute_ms": execute,
    }
    for name, op in figures.items():
        await each(op)()  # warm up: a first run prepares the statements
        growth.show(name, size, await seconds_of(each(op), rounds) * 1000, "ms")


async def main(sizes: list[int], rounds: int) -> dict[str, Any]:
    growth = Growth("table_growth", "rows")
    async with bench_database() as url, await Database.connect(url, pool_size=4) as db:
        kek, reviewer_kek = LocalKek(os.urandom(32)), LocalKek(os.urandom(32))
        ring = await KeyRing.open(db, kek, reviewer_kek=reviewer_kek)
        await ReviewerDirectory(db).add("bench-reviewer", by="bench")  # it decides
        ledger, store = ToolLedger(db, ring), ApprovalStore(db, ring)
        pending, consumed = await templates(ledger, store)
        built = 0
        for size in sizes:
            await bulk_rows(db, built, size, pending, consumed)
            built = size
            await measure(db, ledger, store, size, rounds, growth)
        execute_ms = growth.previous["execute_ms"]
        await ledger.close()
        await store.close()
    return {
        "ours": round(1000 / execute_ms, 1),
        "unit": "calls/s",
        "sizes": sizes,
        "growth": {
            name: round(growth.previous[name] / growth.first[name], 3) for name in growth.first
        },
        "target_growth": 2.0,
    }


def _sizes(text: str) -> list[int]:
    sizes = sorted({int(part) for part in text.split(",") if part.strip()})
    if not sizes or sizes[0] < CALLS_PER_RUN:
        raise argparse.ArgumentTypeError(f"sizes are whole numbers of rows, {CALLS_PER_RUN}+")
    return sizes


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--sizes", type=_sizes, default=[10_000, 1_000_000], help="rows, comma-separated"
    )
    parser.add_argument("--rounds", type=int, default=20, help="timed runs of each figure")
    args = parser.parse_args()
    configure_logging("WARNING")
    figures = asyncio.run(main(args.sizes, args.rounds))
    print(json.dumps({"benchmark": "table_growth", **figures}))
