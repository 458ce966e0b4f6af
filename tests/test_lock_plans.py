"""The statements that lock a call or an approval, the token check, and the read a decision starts
with (an approval with its reviewer's earlier decision from the stream) are planned as the one
row they return. Planned as 1,000 rows, the per-row read of the stream would price the
locking statements above `jit_above_cost` once stream reads cost enough, and every execution
would be JIT-compiled (15 to 50 ms each, on every approved call). A reviewers' history page is
read in its index's order."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from approvals import _sql as approval_sql
from approvals._sql import TOKEN_USE
from ledger.calls import _sql as call_sql
from ledger.store import Database

JIT_ABOVE_COST = 100_000  # PostgreSQL's default

STATEMENTS: dict[str, tuple[str, tuple[Any, ...]]] = {
    "a call": (call_sql.BY_ID_FOR_UPDATE, ("run", "call")),
    "a run's once-per-run tool": (call_sql.ONCE_PER_RUN_FOR_UPDATE, ("run", "tool")),
    "an approval": (approval_sql.LOCKED_WITH_STREAM, ("apr-1",)),
    "an approval to decide": (approval_sql.TO_DECIDE, ("apr-1", "ann", "req-1")),
    "a token": (TOKEN_USE, ("tok-1", b"hash")),
}


@pytest.mark.parametrize("what", STATEMENTS)
async def test_a_single_row_statement_is_planned_as_one_row_below_the_jit_threshold(
    db: Database, what: str
) -> None:
    statement, args = STATEMENTS[what]
    async with db.connection() as conn, conn.transaction():
        # PostgreSQL's defaults, whatever this server is set to.
        await conn.execute("SET LOCAL jit = on")
        await conn.execute(f"SET LOCAL jit_above_cost = {JIT_ABOVE_COST}")
        # Pages priced 50 times over: as if each stream read cost what it does in a big journal.
        await conn.execute("SET LOCAL seq_page_cost = 50")
        await conn.execute("SET LOCAL random_page_cost = 200")
        plan = json.loads(await conn.fetchval("EXPLAIN (FORMAT JSON) " + statement, *args))[0]
    assert "JIT" not in plan  # planned to compile on every execution (where JIT is built in)
    assert plan["Plan"]["Plan Rows"] == 1
    assert plan["Plan"]["Total Cost"] < JIT_ABOVE_COST / 10, plan["Plan"]["Total Cost"]


@pytest.mark.parametrize("statuses", [("approved", "rejected", "edited"), ("expired",)])
async def test_a_history_page_is_read_in_the_order_of_its_index(
    db: Database, statuses: tuple[str, ...]
) -> None:
    # However many approvals were decided, a page reads its rows in index order and stops at
    # its limit: no sort of every decided approval (the inbox reads history on each change).
    statement = approval_sql.history(
        statuses, run_id=False, after=True, tool=False, admitting=False, requested_by=False
    )
    since = datetime.now(UTC)
    async with db.connection() as conn, conn.transaction():
        # As on a table of any size: a plan in index order must exist (a sort left in would
        # mean the index cannot give the order).
        for method in ("seqscan", "bitmapscan", "sort"):
            await conn.execute(f"SET LOCAL enable_{method} = off")
        plan = json.loads(
            await conn.fetchval("EXPLAIN (FORMAT JSON) " + statement, since, "apr-1", 50)
        )[0]
    nodes = [plan["Plan"]]
    found: list[str] = []
    while nodes:
        node = nodes.pop()
        found.append(node["Node Type"])
        if "Index Name" in node:
            found.append(node["Index Name"])
        nodes.extend(node.get("Plans", ()))
    assert "approvals_decided_idx" in found, found
    assert "Sort" not in found, found
