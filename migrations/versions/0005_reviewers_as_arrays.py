"""Who decided an approval and who approved a call, as arrays of names; calls say who approved.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

from ledger.store.sqlscript import execute_script

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# `approvals.decided_by` was the deciders' names joined with commas, and a name may hold a
# comma. The new array is rebuilt from the reviews, which name each reviewer whole: every
# approver of an approval (sorted by code point, as the store sorts them), the one reviewer of
# any other decision; expired and cancelled rows keep their one name (`signoff` or who
# cancelled). PostgreSQL allows no subquery in `ALTER ... USING`, hence a new column.
#
# `tool_calls` gains `approved_by` (the reviewers whose decision allowed the call) and
# `approval_stream` (where that approval's events are), which `call.started` now records, so
# audit reads them from the call. Calls made before this revision are filled in from the
# approval they consumed; nothing is appended to their streams (see
# `CallRecorder.verify_projection`).
UPGRADE = """
LOCK TABLE approvals, tool_calls IN SHARE ROW EXCLUSIVE MODE;
DROP VIEW audit_approvals;
DROP VIEW audit_tool_calls;

ALTER TABLE approvals ADD COLUMN decided_by_names text[];
UPDATE approvals SET decided_by_names = CASE
    WHEN decided_by IS NULL THEN NULL
    WHEN status = 'approved' THEN ARRAY(
        SELECT DISTINCT r->>'reviewer' COLLATE "C" FROM jsonb_array_elements(reviews) r
        WHERE r->>'decision' = 'approve' ORDER BY 1)
    WHEN status IN ('rejected', 'edited', 'responded') THEN ARRAY[reviews->-1->>'reviewer']
    ELSE ARRAY[decided_by]
END;
ALTER TABLE approvals DROP COLUMN decided_by;
ALTER TABLE approvals RENAME COLUMN decided_by_names TO decided_by;

ALTER TABLE tool_calls ADD COLUMN approved_by text[] NOT NULL DEFAULT '{}';
ALTER TABLE tool_calls ADD COLUMN approval_stream text;
UPDATE tool_calls c SET
    approval_stream = 'approval:' || c.approval_id,
    approved_by = CASE WHEN a.status IN ('approved', 'edited') THEN a.decided_by ELSE '{}' END
FROM approvals a WHERE a.approval_id = c.approval_id;

CREATE VIEW audit_tool_calls AS
    SELECT run_id, call_id, tool, effect, once_per_run, request_digest, args_digest,
           idempotency_key,
           approval_id, status, attempts, worker_id, result_digest, resolved_by, started_at,
           finished_at, approved_by, approval_stream
    FROM tool_calls;
CREATE VIEW audit_approvals AS
    SELECT approval_id, run_id, thread_id, tool, kind, call_id, args_digest, binding,
           requested_by, policy, status, decided_by, decided_at, expires_at, consumed_by,
           consumed_at, requested_at
    FROM approvals;
GRANT SELECT ON audit_tool_calls, audit_approvals TO signoff_auditor;
"""

# Back to names joined with commas (ambiguous again for a name with a comma, as it was).
DOWNGRADE = """
LOCK TABLE approvals, tool_calls IN SHARE ROW EXCLUSIVE MODE;
DROP VIEW audit_approvals;
DROP VIEW audit_tool_calls;

ALTER TABLE tool_calls DROP COLUMN approval_stream;
ALTER TABLE tool_calls DROP COLUMN approved_by;
ALTER TABLE approvals ALTER COLUMN decided_by TYPE text USING array_to_string(decided_by, ',');

CREATE VIEW audit_tool_calls AS
    SELECT run_id, call_id, tool, effect, once_per_run, request_digest, args_digest,
           idempotency_key,
           approval_id, status, attempts, worker_id, result_digest, resolved_by, started_at,
           finished_at
    FROM tool_calls;
CREATE VIEW audit_approvals AS
    SELECT approval_id, run_id, thread_id, tool, kind, call_id, args_digest, binding,
           requested_by, policy, status, decided_by, decided_at, expires_at, consumed_by,
           consumed_at, requested_at
    FROM approvals;
GRANT SELECT ON audit_tool_calls, audit_approvals TO signoff_auditor;
"""


def upgrade() -> None:
    execute_script(UPGRADE)


def downgrade() -> None:
    execute_script(DOWNGRADE)
