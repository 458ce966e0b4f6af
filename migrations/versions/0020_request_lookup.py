"""An approval request finds itself through the request's own unique index.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-03

Every new request first looks for itself (the same run, call id and arguments return the same
approval: `approvals._sql.BY_REQUEST`). Two indexes could serve it: `approvals_request_key`,
unique on `(run_id, call_id, args_digest)`, which finds it at once, and `approvals_run_idx` on
`run_id` alone, which reads every approval of the run. On a table whose statistics lag behind
its writes (a young table, or one growing faster than autovacuum analyzes it) the planner
chose the second, so a run's requests got slower as the run grew (152 us of server time a
request in the approvals benchmark). The unique index serves every query by run as the run's
index did, so that one is dropped: one index fewer to write on every request, and one choice
fewer for the planner.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.execute("DROP INDEX approvals_run_idx")


def downgrade() -> None:
    op.execute("CREATE INDEX approvals_run_idx ON approvals (run_id)")
