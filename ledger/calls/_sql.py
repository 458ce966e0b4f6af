"""The tool-call ledger's SQL, in one place. Leases use the server's clock only."""

CHANNEL = "signoff_calls"

COLUMNS = """
run_id, call_id, tool, effect, once_per_run, request_digest, args_digest, args_sealed,
idempotency_key, approval_id, status, attempts, worker_id, result_digest, result_sealed,
resolved_by, started_at, finished_at, version, approved_by, approval_stream, lease_until,
(status = 'running' AND lease_until < now()) AS lapsed
"""

# One round trip: insert the intent and append `call.started` (+ an outcome when an approval
# already settled it). ON CONFLICT covers both the (run, call) key and the once-per-run index:
# a conflict inserts and appends nothing, and the caller takes the slow path.
START = """
WITH claimed AS (
    INSERT INTO tool_calls (run_id, call_id, tool, effect, once_per_run, request_digest,
        args_digest, args_sealed, idempotency_key, approval_id, status, attempts, worker_id,
        lease_until, result_digest, result_sealed, started_at, finished_at, version, approved_by,
        approval_stream)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, 1, $12,
        CASE WHEN $11 = 'running' THEN now() + make_interval(secs => $13) END,
        $14, $15, $16, $17, $18, $26, $27)
    ON CONFLICT DO NOTHING
    RETURNING 1
)
SELECT signoff_append($19, $20, $21, $22, $23, $24, $25, NULL) FROM claimed
"""

# One round trip for every later step (retry, outcome, resolution), fenced by the version the
# caller read: a worker whose call was taken over writes nothing. Waiters are woken only when
# there are some.
ADVANCE = f"""
WITH moved AS (
    UPDATE tool_calls SET status = $3, attempts = $4, worker_id = $5,
        lease_until = CASE WHEN $3 = 'running' THEN now() + make_interval(secs => $6) END,
        result_digest = $7, result_sealed = coalesce($8, result_sealed), resolved_by = $9,
        finished_at = $10, version = $11
    WHERE run_id = $1 AND call_id = $2 AND version = $12
    RETURNING waiters
)
SELECT signoff_append($13, $14, $15, $16, $17, $18, $19,
    CASE WHEN moved.waiters > 0 THEN '{CHANNEL}' END) FROM moved
"""

# Every call one worker runs, renewed in one statement (fenced by version, as every step is).
RENEW = """
UPDATE tool_calls t SET lease_until = now() + make_interval(secs => $4)
FROM unnest($1::text[], $2::text[], $3::int[]) AS held(run_id, call_id, version)
WHERE t.run_id = held.run_id AND t.call_id = held.call_id AND t.version = held.version
  AND t.status = 'running'
"""

BY_ID = f"SELECT {COLUMNS} FROM tool_calls WHERE run_id = $1 AND call_id = $2"
BY_ID_FOR_UPDATE = BY_ID + " FOR UPDATE"
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

STREAM_EVENTS = """
SELECT stream_id, version, type, data::text AS data FROM events
WHERE stream_id LIKE 'call:%' ORDER BY stream_id, version
"""
ALL = f"SELECT {COLUMNS} FROM tool_calls"
