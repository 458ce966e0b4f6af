"""The approval store's SQL, in one place."""

COLUMNS = """
approval_id, run_id, thread_id, tool, kind, call_id, args_digest, binding, requested_by,
policy::text AS policy, status, reviews::text AS reviews, decided_by, decided_at, expires_at,
consumed_by, consumed_at, thread_config::text AS thread_config, requested_at, version
"""

# A second request for the same (run, call, arguments) finds the first one's row and writes
# nothing: the caller returns that approval.
INSERT = """
INSERT INTO approvals (approval_id, run_id, thread_id, tool, kind, call_id, args_digest, binding,
    requested_by, policy, status, reviews, decided_by, decided_at, expires_at, consumed_by,
    consumed_at, thread_config, requested_at, version)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb, $11, $12::jsonb, $13, $14, $15, $16, $17,
    $18::jsonb, $19, $20)
ON CONFLICT (run_id, call_id, args_digest) DO NOTHING
RETURNING approval_id
"""

UPDATE = """
UPDATE approvals SET status = $2, reviews = $3::jsonb, decided_by = $4, decided_at = $5,
    consumed_by = $6, consumed_at = $7, version = $8
WHERE approval_id = $1 AND version = $9
"""

BY_REQUEST = f"""
SELECT {COLUMNS} FROM approvals WHERE run_id = $1 AND call_id = $2 AND args_digest = $3
"""

BY_ID = f"SELECT {COLUMNS} FROM approvals WHERE approval_id = $1"

# Decisions and consumption lock the row: concurrent reviewers and consumers take turns, and the
# second consumer finds the decision used.
BY_ID_FOR_UPDATE = f"SELECT {COLUMNS} FROM approvals WHERE approval_id = $1 FOR UPDATE"

LIST = f"""
SELECT {COLUMNS} FROM approvals
WHERE ($1::text IS NULL OR status = $1) AND ($2::text IS NULL OR run_id = $2)
ORDER BY requested_at, approval_id
LIMIT $3
"""

ALL = f"SELECT {COLUMNS} FROM approvals"

ACTIVE_GRANT = """
SELECT grant_id, granted_by FROM approval_grants
WHERE run_id = $1 AND tool = $2 AND expires_at > $3
ORDER BY expires_at DESC LIMIT 1
"""

INSERT_GRANT = """
INSERT INTO approval_grants (grant_id, run_id, tool, granted_by, granted_at, expires_at)
VALUES ($1, $2, $3, $4, $5, $6)
"""

STREAM_EVENTS = """
SELECT stream_id, version, type, data::text AS data, actor FROM events
WHERE stream_id LIKE 'approval:%' ORDER BY stream_id, version
"""
