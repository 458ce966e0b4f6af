"""An approval request is found by its run and call id through an index of both.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-03

Every new request first looks for itself (the same run, call id and arguments return the same
approval: `approvals._sql.BY_REQUEST`). The only index was on `run_id`, so that lookup read every
approval of the run: the longer a run, the slower each of its requests (a run of a few hundred
requests spent more server time finding nothing than writing the request). The index on
`(run_id, call_id)` finds it at once and serves every query by run as the old one did, which it
replaces, so a write still maintains one index for it.

`CREATE INDEX` blocks writes to `approvals` while it builds (reads go on): on a large table,
run this revision when few requests are made.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("CREATE INDEX approvals_run_call_idx ON approvals (run_id, call_id)")
    op.execute("DROP INDEX approvals_run_idx")


def downgrade() -> None:
    op.execute("CREATE INDEX approvals_run_idx ON approvals (run_id)")
    op.execute("DROP INDEX approvals_run_call_idx")
