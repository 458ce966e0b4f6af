"""The tool-call ledger's queries, in one place (its row writes are `projection.CALLS`'s).
Leases use the server's clock only."""

CHANNEL = "signoff_calls"

COLUMNS = """
run_id, call_id, tool, effect, once_per_run, request_digest, args_digest, args_sealed,
idempotency_key, approval_id, status, attempts, worker_id, result_digest, result_sealed,
resolved_by, started_at, finished_at, version, approved_by, approval_stream, stream_id,
lease_until,
(status = 'running' AND lease_until < now()) AS lapsed
"""

# Every call one worker runs, renewed in one statement (fenced by version, as every step is,
# and by each lease's token).
RENEW = "SELECT signoff_renew_leases($1::text[], $2::text[], $3::int[], $4::bytea[], $5)"

# The digest of the arguments an approval was asked for, in the first event of the stream its
# gate names, which the request digest of the call it allows repeats.
ASKED_DIGEST = "SELECT data->>'args_digest' FROM events WHERE stream_id = $1 AND version = 1"
# bindings.py: what that first event says of the call the approval was asked for.
APPROVAL_REQUEST = "SELECT data::text FROM events WHERE stream_id = $1 AND version = 1"

BY_ID = f"SELECT {COLUMNS} FROM tool_calls WHERE run_id = $1 AND call_id = $2"
ONCE_PER_RUN = f"SELECT {COLUMNS} FROM tool_calls WHERE run_id = $1 AND tool = $2 AND once_per_run"

# The ledger acts on a row only when the call's stream (the one the row names) agrees with it,
# so the rows that are acted on come with their stream in the same statement (a new call never
# reads one).
_STREAM_COLUMN = """
(SELECT json_agg(json_build_array(e.version, e.type, e.data, e.actor) ORDER BY e.version)::text
 FROM events e WHERE e.stream_id = t.stream_id) AS stream
"""
BY_ID_CHECKED = (
    f"SELECT {COLUMNS}, {_STREAM_COLUMN} FROM tool_calls t WHERE run_id = $1 AND call_id = $2"
)
# Locks are taken by the database's functions (FOR UPDATE needs rights no worker has).
# With the lease's token hash: a claim whose answer was lost finds its own lease by it.
BY_ID_FOR_UPDATE = (
    f"SELECT {COLUMNS}, {_STREAM_COLUMN}, t.lease_token_hash FROM signoff_lock_call($1, $2) t"
)
STREAM = "SELECT version, type, data::text, actor FROM events WHERE stream_id = $1 ORDER BY version"
ONCE_PER_RUN_FOR_UPDATE = f"SELECT {COLUMNS} FROM signoff_lock_once_per_run($1, $2)"

ADD_WAITER = "SELECT signoff_count_waiter($1, $2, 1)"
DROP_WAITER = "SELECT signoff_count_waiter($1, $2, -1)"

LAPSED = f"""
SELECT {COLUMNS} FROM tool_calls WHERE status = 'running' AND lease_until < now() LIMIT $1
"""

# resolution.py
RESOLUTIONS = """
SELECT r.stream_id, r.version, r.data::text AS data, s.data->>'request_digest' AS request_digest
FROM events r JOIN events s ON s.stream_id = r.stream_id AND s.version = 1
WHERE r.type = 'call.resolved' ORDER BY r.stream_id, r.version
"""
