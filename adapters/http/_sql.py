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
