"""Approvals: the projection of the `approval:<id>` streams, and sticky grants.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

from ledger.store.sqlscript import execute_script

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Written in the same transaction as the events it projects, and rebuildable from them.
# `version` is the stream version the row reflects: the next append expects it.
UPGRADE = """
CREATE TABLE approvals (
    approval_id   text PRIMARY KEY,
    run_id        text NOT NULL,
    thread_id     text,
    tool          text NOT NULL,
    kind          text NOT NULL,
    call_id       text NOT NULL,
    args_digest   text NOT NULL,
    binding       text NOT NULL,
    requested_by  text NOT NULL,
    policy        jsonb NOT NULL,
    status        text NOT NULL CHECK (status IN
                  ('pending', 'approved', 'rejected', 'edited', 'responded', 'expired',
                   'cancelled')),
    reviews       jsonb NOT NULL DEFAULT '[]',
    decided_by    text,
    decided_at    timestamptz,
    expires_at    timestamptz,
    consumed_by   text,
    consumed_at   timestamptz,
    thread_config jsonb,
    requested_at  timestamptz NOT NULL,
    version       integer NOT NULL,
    CONSTRAINT approvals_request_key UNIQUE (run_id, call_id, args_digest)
);
CREATE INDEX approvals_pending_idx ON approvals (requested_at) WHERE status = 'pending';
CREATE INDEX approvals_run_idx ON approvals (run_id);

CREATE TABLE approval_grants (
    grant_id    text PRIMARY KEY,
    run_id      text NOT NULL,
    tool        text NOT NULL,
    granted_by  text NOT NULL,
    granted_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
);
CREATE INDEX approval_grants_run_tool_idx ON approval_grants (run_id, tool, expires_at);

GRANT SELECT, INSERT, UPDATE ON approvals, approval_grants TO signoff_app;
"""

DOWNGRADE = "DROP TABLE approval_grants; DROP TABLE approvals;"


def upgrade() -> None:
    execute_script(UPGRADE)


def downgrade() -> None:
    execute_script(DOWNGRADE)
