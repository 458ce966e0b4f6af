"""The SQL of `adapters.http`, in one place: the statements its modules run."""

# service.py
HAS_ROLE = "SELECT pg_has_role(session_user, $1, 'MEMBER')"


# webhooks.py
LATEST = "SELECT signoff_webhook_latest($1)"

RECORD = "SELECT signoff_webhook_record($1::bigint[], $2)"

CLAIM = "SELECT * FROM signoff_webhook_claim($1, $2, $3)"

ATTEMPTED = "SELECT signoff_webhook_attempted($1, $2, $3, $4, $5, $6)"

CALL = """
SELECT run_id, call_id, tool, status FROM tool_calls
WHERE run_id = $1 AND call_id = $2 AND stream_id = $3
"""


# gauges.py. Each reads an index, never a whole table that only grows (which index: the
# module's doc). Ages are on the database's clock, as the times they subtract; the window of
# recent calls starts at now(), not clock_timestamp(), which is volatile and no index bound.
PENDING_BY_TOOL = """
SELECT tool, count(*) AS pending,
       extract(epoch FROM clock_timestamp() - min(requested_at))::float8 AS oldest
FROM approvals WHERE status = 'pending' AND (expires_at IS NULL OR expires_at > now())
GROUP BY tool
"""

# Running calls whose worker stopped renewing their lease: a write among them becomes
# outcome_unknown when some worker reaps it (`tool_calls_running_idx`).
LAPSED_CALLS = """
SELECT count(*) FROM tool_calls WHERE status = 'running' AND lease_until < now()
"""

OUTCOME_UNKNOWN = """
SELECT count(*) AS waiting,
       coalesce(extract(epoch FROM clock_timestamp() - min(finished_at))::float8, 0) AS oldest
FROM tool_calls WHERE status = 'outcome_unknown'
"""

RECENT_CALLS = """
SELECT tool, status, count(*) AS calls FROM tool_calls
WHERE started_at >= now() - make_interval(secs => $1)
GROUP BY tool, status
"""

DELIVERY_STATE = "SELECT * FROM signoff_delivery_state($1::text[])"

SEALING_KEYS = """
SELECT key_id, purpose, sealed FROM data_keys
WHERE state = 'active' AND purpose IN ('checkpoint', 'result')
"""

SAMPLE_TIMEOUT = "SET LOCAL statement_timeout = '2s'"
