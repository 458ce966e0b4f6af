"""The journal's SQL: appends, and every read of the `events` table the journal's readers make
(`reader`); the statements' columns are `EVENT_COLUMNS`, in the order of `Event`'s fields."""

APPEND_CALL = "signoff_append($1, $2, $3, $4, $5, $6)"
APPEND = f"SELECT {APPEND_CALL}"
HEAD = "SELECT coalesce(max(version), 0) FROM events WHERE stream_id = $1"
# The columns of `Event`, in its order. The append functions record tag version 3 (with the
# login); events of 2 were written before. Any other version names no tag this code hashes
# with, so such an event does not verify.
EVENT_COLUMNS = (
    "position, txid::text::bigint, stream_id, version, type, data::text, actor, recorded_at, hash,"
    " tag_version, login"
)
READ_STREAM = f"""
SELECT {EVENT_COLUMNS} FROM events WHERE stream_id = $1 AND version > $2 ORDER BY version
"""
READ_ALL = f"""
SELECT {EVENT_COLUMNS} FROM events
WHERE (txid, position) > ($1::text::xid8, $2)
  AND txid < pg_snapshot_xmin(pg_current_snapshot())
ORDER BY txid, position
LIMIT $3
"""
LAST_READ = """
SELECT position FROM events WHERE txid < pg_snapshot_xmin(pg_current_snapshot())
ORDER BY txid DESC, position DESC LIMIT 1
"""
# The time as its canonical text, formed as the append functions form it when they hash it.
VERIFY = """
SELECT position, stream_id, version, type, data::text, actor,
       to_char(recorded_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), hash,
       tag_version, login
FROM events ORDER BY stream_id, version
"""
# One event by position, and its transaction id (where a position lies in the global order).
EVENT_AT = f"SELECT {EVENT_COLUMNS} FROM events WHERE position = $1"
TXID_OF = "SELECT txid::text FROM events WHERE position = $1"
# The events of several streams, and of the streams whose id starts with a prefix.
READ_STREAMS = f"""
SELECT {EVENT_COLUMNS} FROM events WHERE stream_id = ANY($1::text[]) ORDER BY stream_id, version
"""
READ_PREFIX = f"""
SELECT {EVENT_COLUMNS} FROM events WHERE starts_with(stream_id, $1) ORDER BY stream_id, version
"""
# The streams of the events after a place in the global order, committed or not (an auditor's
# read in a snapshot of its own).
STREAMS_AFTER = (
    "SELECT stream_id FROM events WHERE (txid, position) > ($1::text::xid8, $2) "
    "ORDER BY txid, position"
)
# Events of some types, in the global order after a place, up to the horizon.
READ_TYPES = f"""
SELECT {EVENT_COLUMNS} FROM events
WHERE type = ANY($4::text[])
  AND (txid, position) > ($1::text::xid8, $2)
  AND txid < pg_snapshot_xmin(pg_current_snapshot())
ORDER BY txid, position
LIMIT $3
"""
# The newest position handed out (committed or not): how big the journal about is.
NEWEST_POSITION = "SELECT max(position) FROM events"
# The horizon now: xmin and xmax of a fresh snapshot (equal when no transaction holds an id),
# the events at or above xmin (an index range on events (txid, position)) and how long the
# oldest of them has waited, and the age of the transaction that holds xmin when
# pg_stat_activity shows it to this login (NULL otherwise).
HORIZON = """
SELECT pg_snapshot_xmin(s)::text AS xmin, pg_snapshot_xmax(s)::text AS xmax, w.behind,
       extract(epoch FROM clock_timestamp() - w.oldest)::float8 AS waited,
       (SELECT extract(epoch FROM clock_timestamp() - min(a.xact_start))::float8
          FROM pg_stat_activity a WHERE a.backend_xid = xid(pg_snapshot_xmin(s))) AS seen_age
FROM pg_current_snapshot() AS s,
     LATERAL (SELECT count(*) AS behind, min(recorded_at) AS oldest
              FROM events WHERE txid >= pg_snapshot_xmin(s)) AS w
"""
