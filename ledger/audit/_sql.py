"""The SQL of `ledger.audit`, in one place: the statements its modules run."""

# integrity.py
# The row's `xmin` is the (32-bit) id of the transaction that inserted it; `txid` claims the
# full 64-bit id. Both are read in one snapshot, whose xmax is the next id to be handed out.
SNAPSHOT = """
SELECT count(*),
       pg_snapshot_xmin(pg_current_snapshot())::text::bigint,
       pg_snapshot_xmax(pg_current_snapshot())::text::bigint
FROM events
"""

SUSPECTS = """
SELECT position, stream_id, version, txid::text::bigint AS txid, xmin::text::bigint AS xmin
FROM events
WHERE txid::text::bigint % 4294967296 <> xmin::text::bigint
   OR txid >= pg_snapshot_xmax(pg_current_snapshot())
ORDER BY position
"""


# queries.py
# `approved_by` is an array of whole reviewer names: `= ANY` matches one name exactly.
FIND = """
SELECT run_id, call_id, tool, effect, once_per_run, request_digest, args_digest,
       idempotency_key, approval_id, status, attempts, worker_id, started_at,
       finished_at, result_digest, resolved_by, version, approved_by, approval_stream,
       stream_id
FROM tool_calls
WHERE ($1::text IS NULL OR run_id = $1)
  AND ($2::text IS NULL OR tool = $2)
  AND ($3::text IS NULL OR status = $3)
  AND ($4::timestamptz IS NULL OR started_at >= $4)
  AND ($5::timestamptz IS NULL OR started_at < $5)
  AND ($6::text IS NULL OR $6 = ANY(approved_by))
  AND ($8::text IS NULL OR call_id = $8)
  AND ($9::timestamptz IS NULL OR (started_at, run_id, call_id) > ($9, $10::text, $11::text))
ORDER BY started_at, run_id, call_id
LIMIT $7
"""

SEALED = "SELECT args_sealed, result_sealed FROM tool_calls WHERE run_id = $1 AND call_id = $2"


# export.py
PREVIOUS = """
SELECT p.stream_id, p.version, p.hash
FROM unnest($1::text[], $2::int[]) AS wanted(stream_id, version)
JOIN events p ON p.stream_id = wanted.stream_id AND p.version = wanted.version
"""


# tree.py
INTEGRATE = "SELECT signoff_tree_integrate($1, $2, $3, $4, $5, $6, $7, $8)"

HORIZON = "SELECT pg_snapshot_xmin(pg_current_snapshot())::text, now()"

STATE = "SELECT tree_size, last_txid::text, last_position, root FROM tree_state"

TILES = """
SELECT t.level, t.index, t.hashes
FROM unnest($1::int[], $2::bigint[]) AS wanted(level, index)
JOIN tree_tiles t ON t.level = wanted.level AND t.index = wanted.index
"""

# Leaves after a boundary, below the horizon $3, at most $4 of them. (Ordered by the xid8
# column itself: an output column named `txid` holding its text would sort as text.)
AFTER = """
SELECT e.txid::text AS txid_text, e.position, e.hash FROM events e
WHERE (e.txid, e.position) > ($1::text::xid8, $2) AND e.txid < $3::text::xid8
ORDER BY e.txid, e.position
LIMIT $4
"""

# The level-0 tile whose first leaf is the last one at or before the event, then the event's
# offset in it: two index lookups and at most 255 rows.
TILE_OF = """
SELECT t.index, t.first_txid::text AS first_txid_text, t.first_position FROM tree_tiles t
WHERE t.level = 0 AND (t.first_txid, t.first_position) <= ($1::text::xid8, $2)
ORDER BY t.first_txid DESC, t.first_position DESC
LIMIT 1
"""

OFFSET_IN_TILE = """
SELECT count(*) FROM (
    SELECT 1 FROM events
    WHERE (txid, position) >= ($1::text::xid8, $2) AND (txid, position) < ($3::text::xid8, $4)
    LIMIT 256
) AS before_it
"""

STORED_COUNT = "SELECT count(*) FROM tree_tiles"


# digest.py

# The first $2 leaves (all of them when $2 is NULL) in the journal's global order below $1.
LEAVES = """
SELECT position, hash FROM events
WHERE txid < $1::text::xid8
ORDER BY txid, position
LIMIT $2
"""

HASH_OF = "SELECT hash FROM events WHERE stream_id = $1 AND version = $2"

LEAVES_AFTER = """
SELECT position, hash FROM events
WHERE (txid, position) > ($1::text::xid8, $2) AND txid < $3::text::xid8
ORDER BY txid, position
LIMIT $4
"""


# resume.py
# The events after the boundary in the global order, and those after its position: a forged
# txid can only hide a row inserted since among the second.
RECENT = """
FROM events
WHERE ((txid, position) > ($1::text::xid8, $2) OR position > $2)
"""

ORDER = f"""
SELECT count(*),
       pg_snapshot_xmin(pg_current_snapshot())::text::bigint,
       pg_snapshot_xmax(pg_current_snapshot())::text::bigint,
       count(*) FILTER (WHERE txid >= pg_snapshot_xmin(pg_current_snapshot()))
{RECENT}
"""

RECENT_SUSPECTS = f"""
SELECT position, stream_id, version, txid::text::bigint AS txid, xmin::text::bigint AS xmin
{RECENT}
  AND (txid::text::bigint % 4294967296 <> xmin::text::bigint
       OR txid >= pg_snapshot_xmax(pg_current_snapshot()))
ORDER BY position
"""
