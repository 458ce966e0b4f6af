"""The reviewer directory: the projection of the `reviewer:<id>` streams.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01

A reviewer's groups come from here, never from whoever asks to decide. The table is written
only by `ledger.journal.projection.commit` (the row with its `reviewer.*` events, in one
statement), so it can be rebuilt from the journal. Directory changes are an administrator's:
no role but the owner may write the table. Workers and reviewers read it (a decision reads the
reviewer's groups in its own transaction); auditors read `audit_reviewers`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ledger.store.sqlscript import execute_script

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# `reviewer_id` is normalised by `approvals.identity.reviewer_id` (NFKC, trimmed, no whitespace,
# controls or separators, at most 128 characters); the checks here are a backstop. A removed
# reviewer keeps its row (`active` false), so its stream and row stay one history.
UPGRADE = """
CREATE TABLE reviewers (
    reviewer_id text PRIMARY KEY
                CHECK (reviewer_id <> '' AND length(reviewer_id) <= 128
                       AND reviewer_id !~ '[[:space:][:cntrl:]]'),
    groups      text[] NOT NULL DEFAULT '{}',
    active      boolean NOT NULL,
    changed_by  text NOT NULL,
    changed_at  timestamptz NOT NULL,
    version     integer NOT NULL
);
CREATE VIEW audit_reviewers AS
    SELECT reviewer_id, groups, active, changed_by, changed_at, version FROM reviewers;
GRANT SELECT ON reviewers TO signoff_app, signoff_reviewer;
GRANT SELECT ON audit_reviewers TO signoff_auditor;
"""

DOWNGRADE = "DROP VIEW audit_reviewers; DROP TABLE reviewers;"


def upgrade() -> None:
    execute_script(UPGRADE)


def downgrade() -> None:
    execute_script(DOWNGRADE)
