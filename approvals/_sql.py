"""The approval store's queries, in one place (its row writes are `projection.APPROVALS`'s).

`BY_REQUEST` finds a request by its arguments' digest under any live value-MAC key (and the
unkeyed SHA-256 of requests older than keyed digests): after a rotation the same (run, call id,
arguments) still finds its approval, in one statement. (Two processes asking the same new
question at the same moment within `key_refresh_seconds` of a rotation, one still on the old
key, may record two requests; the tool-call ledger still runs the call at most once.)"""

from .projection import COLUMNS

BY_REQUEST = f"""
SELECT {COLUMNS} FROM approvals
WHERE run_id = $1 AND call_id = $2 AND args_digest = ANY($3::text[])
ORDER BY requested_at LIMIT 1
"""

# A new request looks for itself and for a sticky grant of its run and tool in one statement:
# `r` is empty (all NULL) when the request is new, `grant_id` NULL when no grant holds.
BY_REQUEST_WITH_GRANT = f"""
SELECT r.*, g.grant_id AS active_grant FROM (SELECT) AS one
LEFT JOIN LATERAL ({BY_REQUEST}) AS r ON true
LEFT JOIN LATERAL (
    SELECT grant_id FROM approval_grants
    WHERE run_id = $1 AND tool = $4 AND expires_at > $5
    ORDER BY expires_at DESC LIMIT 1
) AS g ON true
"""

BY_ID = f"SELECT {COLUMNS} FROM approvals WHERE approval_id = $1"

# A step on an approval (a decision, a cancellation, an expiry, a consumption) reads it without
# a lock and commits fenced at the version it read (`ApprovalStore._advance`): one read and one
# write, no transaction around them. The same statement brings, when asked, the approval's stream
# ($2: a consumer proves the row by it; row and stream are then of one snapshot) and the
# directory's groups of a deciding reviewer ($3).
_STREAM = """(
SELECT json_agg(json_build_array(e.version, e.type, e.data, e.actor) ORDER BY e.version)::text
FROM events e WHERE e.stream_id = 'approval:' || t.approval_id)"""
TO_ADVANCE = f"""
SELECT {COLUMNS}, CASE WHEN $2 THEN {_STREAM} END AS stream,
(SELECT groups FROM reviewers WHERE reviewer_id = $3 AND active) AS reviewer_groups
FROM approvals t WHERE t.approval_id = $1
"""
# Inside a caller's transaction a consumer locks the row instead (the caller's later statements
# must meet no conflict), through the database's function (FOR UPDATE needs rights no worker
# has). The stream is the statement's snapshot, taken before the lock was granted: a row locked
# after waiting for another writer is newer than it, so the consumer reads the stream again when
# it does not prove the row (the lock keeps both still).
LOCKED_WITH_STREAM = f"""
SELECT {COLUMNS}, {_STREAM} AS stream, NULL::text[] AS reviewer_groups
FROM signoff_lock_approval($1) t
"""

# Keyset pages: after ($4, $5), the (requested_at, approval_id) of the last row seen.
LIST = f"""
SELECT {COLUMNS} FROM approvals
WHERE ($1::text IS NULL OR status = $1) AND ($2::text IS NULL OR run_id = $2)
  AND ($4::timestamptz IS NULL OR (requested_at, approval_id) > ($4, $5::text))
  AND ($6::text IS NULL OR tool = $6)
  AND ($7::text[] IS NULL OR policy->'approvers' = '[]'::jsonb OR policy->'approvers' ?| $7)
ORDER BY requested_at, approval_id
LIMIT $3
"""

GRANT = "SELECT signoff_grant($1, $2, $3, $4, $5, $6, $7::json)"
