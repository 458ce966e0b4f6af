"""A tool call's commit evaluates half as many PL/pgSQL expressions, with the same checks.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-03

Sampled on the server (`perf` on the backends of the tool-ledger benchmark, against the code
before the write functions), a call's extra server time was mostly PL/pgSQL preparing the simple
expressions of `signoff_commit_call` (each assignment, each IF) and checking cached plans against
the pinned `search_path`: PL/pgSQL prepares each such expression again in every transaction, and
after each switch of path checks it against the path, so what counts is how many are evaluated,
not how big they are. A call commits one transaction a step and evaluated about thirty a step.

The function is rewritten to evaluate about half as many, checking and writing exactly what
0018's did (with 0019's tag), with the same errors:

- one test of the status the events leave and of a new call's stream on the common path;
  which of them failed is worked out only when one did, for its message;
- each event's canonical bytes and chain hash are computed in its INSERT, which returns the
  new head hash and whether the row was written at the top level of the transaction, instead
  of seven assignments an event;
- the stream's fence is tested once: a later step's head is read at the version its row was
  fenced at (none when the stream is elsewhere), and one test at the end refuses any step
  whose events were not all written (a fence that failed, or a version that was taken).

The downgrade puts back the function as 0019 left it.
"""

from __future__ import annotations

from collections.abc import Sequence

from ledger.store.sqlscript import execute_script, load_revision

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The function's parameters, its rights check, its row writes and its refusal of a stream that
# is elsewhere are 0018's, as they are.
_HOT = load_revision(__file__, "0018_hot_path")

TAG = "signoff.event.v2"
GENESIS = "'\\x" + "00" * 32 + "'::bytea"

# The status each last event type leaves a call in (`call.resolved`: the one it names); in
# parentheses, as PL/pgSQL ends an IF's condition at the first THEN outside them.
_STATUS_AFTER = """(CASE p_types[n]
        WHEN 'call.started' THEN 'running'
        WHEN 'call.retried' THEN 'running'
        WHEN 'call.succeeded' THEN 'succeeded'
        WHEN 'call.failed' THEN 'failed'
        WHEN 'call.outcome_unknown' THEN 'outcome_unknown'
        WHEN 'call.denied' THEN 'denied'
        WHEN 'call.responded' THEN 'responded'
        WHEN 'call.resolved' THEN p_data[n]->>'status'
    END)"""
_BAD_NEW_STREAM = """p_insert AND (p_expected <> 0 OR p_types[1] IS DISTINCT FROM 'call.started'
                OR p_stream IS DISTINCT FROM 'call:'
                    || replace(replace(p_run_id, '%', '%25'), '/', '%2F') || '/'
                    || replace(replace(p_call_id, '%', '%25'), '/', '%2F'))"""


def _field(value: str) -> str:
    """A field of ledger/canonical.py's bytes: a 4-byte big-endian length, then its UTF-8."""
    utf8 = f"convert_to({value}, 'UTF8')"
    return f"int4send(octet_length({utf8})) || {utf8}"


_HASH = (
    f"sha256(coalesce(head_hash, {GENESIS}) || convert_to('{TAG}', 'UTF8')\n                || "
    + "\n                || ".join(
        _field(v)
        for v in (
            "p_stream",
            "(p_expected + i)::text",
            "p_types[i]",
            "p_actors[i]",
            """to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')""",
            "p_data[i]::text",
        )
    )
    + ")"
)

COMMIT_CALL = (
    "\nCREATE OR REPLACE FUNCTION signoff_commit_call("
    + _HOT._CALL_PARAMETERS
    + _HOT._EVENTS_PARAMETERS
    + """
    n integer := cardinality(p_types);
    at timestamptz := clock_timestamp();
    lease timestamptz := CASE WHEN p_status = 'running'
        THEN now() + make_interval(secs => least(greatest(p_lease_seconds, 1), 86400)) END;
    refused text;
    head_hash bytea;
    head_version integer;
    positions bigint[];
    pos bigint;
    top_level boolean;
    wake boolean;
    a approvals;
BEGIN"""
    + _HOT._CHECK_APPEND
    + f"""    IF p_status IS DISTINCT FROM {_STATUS_AFTER} OR {_BAD_NEW_STREAM} THEN
        IF p_status IS DISTINCT FROM {_STATUS_AFTER} THEN
            RAISE EXCEPTION 'a % event leaves call % %, not %', p_types[n], p_stream,
                    coalesce({_STATUS_AFTER}, 'unchanged'), coalesce(p_status, 'null')
                USING ERRCODE = 'SG422',
                      DETAIL = json_build_object('stream_id', p_stream, 'type', p_types[n])::text;
        END IF;
        RAISE EXCEPTION 'a new call starts its own stream with call.started'
            USING ERRCODE = 'SG422',
                  DETAIL = json_build_object('stream_id', p_stream, 'type', p_types[1])::text;
    END IF;
    -- A later step moves only a running call, or resolves an `outcome_unknown` one: a finished
    -- call never runs again, whatever it is given.
    IF p_insert THEN
"""
    + _HOT._NEW_CALL_ROW
    + """        -- A new stream starts from the genesis hash (head_hash NULL below).
    ELSE
"""
    + _HOT._LATER_STEP_ROW
    + f"""        -- The head the row was fenced at; none when the stream is not where the row is.
        SELECT hash INTO head_hash FROM events WHERE stream_id = p_stream AND version = p_expected;
    END IF;
    IF FOUND THEN  -- the new row written, or the later step's head read
        FOR i IN 1 .. n LOOP
            INSERT INTO events (txid, stream_id, version, type, data, actor, recorded_at, hash)
                VALUES (pg_current_xact_id(), p_stream, p_expected + i, p_types[i], p_data[i],
                        p_actors[i], at,
                        {_HASH})
                ON CONFLICT (stream_id, version) DO NOTHING
                -- In a savepoint the row's xmin is the savepoint's, which `ledger verify`
                -- cannot tell from a forged txid (0015).
                RETURNING position, hash,
                    xmin::text::bigint = pg_current_xact_id()::text::bigint % 4294967296
                INTO pos, head_hash, top_level;
            IF top_level IS NOT TRUE THEN
                EXIT WHEN pos IS NULL;  -- the version was taken: refused below
                RAISE EXCEPTION 'events are appended at a transaction''s top level, '
                        'not in a savepoint (stream %)', p_stream
                    USING ERRCODE = 'SG425',
                          DETAIL = json_build_object('stream_id', p_stream)::text;
            END IF;
            positions := positions || pos;
        END LOOP;
    END IF;
    IF cardinality(positions) IS DISTINCT FROM n THEN
"""
    + _HOT._REFUSE_CONFLICT
    + """    END IF;
    IF wake AND p_notify IS NOT NULL THEN
        PERFORM pg_notify(p_notify, p_stream);
    END IF;
    RETURN positions;
END
$$;
"""
)


def upgrade() -> None:
    execute_script(COMMIT_CALL)


def downgrade() -> None:
    text = _HOT.COMMIT_CALL.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
    execute_script(text.replace("'signoff.event.v1'", f"'{TAG}'"))
