"""The tool-call ledger's queries, in one place (its row writes are `projection.CALLS`'s).
Leases use the server's clock only."""

CHANNEL = "signoff_calls"

COLUMNS = """
run_id, call_id, tool, effect, once_per_run, request_digest, args_digest, args_sealed,
idempotency_key, approval_id, status, attempts, worker_id, result_digest, result_sealed,
resolved_by, started_at, finished_at, version, approved_by, approval_stream, lease_until,
(status = 'running' AND lease_until < now()) AS lapsed
"""

# Every call one worker runs, renewed in one statement (fenced by version, as every step is).
RENEW = """
UPDATE tool_calls t SET lease_until = now() + make_interval(secs => $4)
FROM unnest($1::text[], $2::text[], $3::int[]) AS held(run_id, call_id, version)
WHERE t.run_id = held.run_id AND t.call_id = held.call_id AND t.version = held.version
  AND t.status = 'running'
"""

BY_ID = f"SELECT {COLUMNS} FROM tool_calls WHERE run_id = $1 AND call_id = $2"

# The ledger acts on a row only when the call's stream ($3) agrees with it, so the rows that are
# acted on come with their stream in the same statement (a new call never reads one).
_STREAM_COLUMN = """
(SELECT json_agg(json_build_array(e.version, e.type, e.data, e.actor) ORDER BY e.version)::text
 FROM events e WHERE e.stream_id = $3) AS stream
"""
BY_ID_CHECKED = (
    f"SELECT {COLUMNS}, {_STREAM_COLUMN} FROM tool_calls WHERE run_id = $1 AND call_id = $2"
)
BY_ID_FOR_UPDATE = BY_ID_CHECKED + " FOR UPDATE"
STREAM = "SELECT version, type, data::text, actor FROM events WHERE stream_id = $1 ORDER BY version"
ONCE_PER_RUN_FOR_UPDATE = (
    f"SELECT {COLUMNS} FROM tool_calls WHERE run_id = $1 AND tool = $2 AND once_per_run FOR UPDATE"
)

ADD_WAITER = "UPDATE tool_calls SET waiters = waiters + 1 WHERE run_id = $1 AND call_id = $2"
DROP_WAITER = """
UPDATE tool_calls SET waiters = waiters - 1 WHERE run_id = $1 AND call_id = $2 AND waiters > 0
"""

LAPSED = f"""
SELECT {COLUMNS} FROM tool_calls WHERE status = 'running' AND lease_until < now() LIMIT $1
"""
