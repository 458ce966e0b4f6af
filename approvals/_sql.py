"""The approval store's SQL, in one place."""

COLUMNS = """
approval_id, run_id, thread_id, tool, kind, call_id, args_digest, binding, requested_by,
policy::text AS policy, status, reviews::text AS reviews, decided_by, decided_at, expires_at,
consumed_by, consumed_at, thread_config::text AS thread_config, requested_at, version
"""

INSERT = """
INSERT INTO approvals (approval_id, run_id, thread_id, tool, kind, call_id, args_digest, binding,
    requested_by, policy, status, expires_at, thread_config, requested_at, version)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb, $11, $12, $13::jsonb, $14, $15)
ON CONFLICT (run_id, call_id, args_digest) DO NOTHING
RETURNING approval_id
"""

BY_REQUEST = f"""
SELECT {COLUMNS} FROM approvals WHERE run_id = $1 AND call_id = $2 AND args_digest = $3
"""

BY_ID = f"SELECT {COLUMNS} FROM approvals WHERE approval_id = $1"

BY_ID_FOR_UPDATE = f"SELECT {COLUMNS} FROM approvals WHERE approval_id = $1 FOR UPDATE"

UPDATE_DECISION = """
UPDATE approvals SET status = $2, reviews = $3::jsonb, decided_by = $4, decided_at = $5,
    version = $6
WHERE approval_id = $1
"""

# Single use: only one transaction can move consumed_at from NULL; a concurrent one waits for
# the row lock, then finds it set and updates nothing.
CONSUME = f"""
UPDATE approvals SET consumed_by = $2, consumed_at = $3, version = version + 1
WHERE approval_id = $1 AND consumed_at IS NULL AND status <> 'pending'
RETURNING {COLUMNS}
"""

ACTIVE_GRANT = """
SELECT grant_id, granted_by FROM approval_grants
WHERE run_id = $1 AND tool = $2 AND expires_at > $3
ORDER BY expires_at DESC LIMIT 1
"""

INSERT_GRANT = """
INSERT INTO approval_grants (grant_id, run_id, tool, granted_by, granted_at, expires_at)
VALUES ($1, $2, $3, $4, $5, $6)
"""

LIST = f"""
SELECT {COLUMNS} FROM approvals
WHERE ($1::text IS NULL OR status = $1) AND ($2::text IS NULL OR run_id = $2)
ORDER BY requested_at, approval_id
LIMIT $3
"""
