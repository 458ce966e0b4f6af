"""Functions that return at most one row say so to the planner (ROWS 1).

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-04

A function returning SETOF is planned as returning 1,000 rows unless it says otherwise. The
statements that lock a call or an approval read its stream in a subquery per row of
`signoff_lock_call` / `signoff_lock_approval`, so the planner priced them at 1,000 stream
reads. Once the journal held enough events for one stream read to cost about 100, each
statement cost more than `jit_above_cost` (100,000 by default), and PostgreSQL JIT-compiled it
on every execution: 15 to 50 ms a statement (auto_explain during `bench.scale_out`, where every
approved call locks both), against well under 1 ms for the statement itself. An approved call
got slower as the journal grew, whatever the number of workers.

The lock functions select by a unique key (a call's primary key, a run's once-per-run tool,
an approval's id) and the token check answers with one row, so one row is the most any of them
returns.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SINGLE_ROW = (
    "signoff_lock_call(text, text)",
    "signoff_lock_once_per_run(text, text)",
    "signoff_lock_approval(text)",
    "signoff_token_use(text, bytea)",
)


def upgrade() -> None:
    for function in SINGLE_ROW:
        op.execute(f"ALTER FUNCTION {function} ROWS 1")


def downgrade() -> None:
    for function in SINGLE_ROW:
        op.execute(f"ALTER FUNCTION {function} ROWS 1000")
