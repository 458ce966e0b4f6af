"""Write functions that cost what the writes did before them: same checks, fewer calls.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-01

What each function checks and writes is 0010's; only how it runs changes:

- `signoff_append` writes the events itself instead of calling `signoff_write_events`: every
  call of a SECURITY DEFINER function with a pinned `search_path` sets and restores it, and an
  append paid that twice. The body is `signoff_write_events`'s, after `signoff_append`'s own
  check that projected streams (and tokens', 0014) are written only with their rows.
- The row locks are PL/pgSQL: a SQL function that cannot be inlined (SECURITY DEFINER) is
  planned again on every call, a PL/pgSQL one once per connection.

And one check more, in `signoff_append` and `signoff_write_events` (which the commit functions
call): events are appended at a transaction's top level. An event inserted in a savepoint has
the savepoint's id as its row's `xmin`, not its `txid`'s, and `ledger verify` cannot tell that
from a forged `txid`, so it would report the event for ever; now the append is refused (SG425)
and nothing is written.

The downgrade puts back the definitions of 0014 (the append) and 0010 (the locks and the write
function).
"""

from __future__ import annotations

from collections.abc import Sequence

from ledger.store.sqlscript import execute_script, load_revision

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_DEFINER = "SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp"

APPEND = f"""
CREATE OR REPLACE FUNCTION signoff_append(
    p_stream text, p_expected integer, p_types text[], p_data json[], p_actors text[],
    p_notify text
) RETURNS bigint[]
LANGUAGE plpgsql {_DEFINER} AS $$
DECLARE
    n integer := cardinality(p_types);
    -- current_user: the owner, whose appends are not checked.
    is_owner boolean := pg_has_role(session_user, current_user, 'MEMBER');
    refused text;
    head_version integer;
    head_hash bytea;
    at timestamptz := clock_timestamp();
    -- The canonical bytes of ledger/canonical.py: the tag, then six fields, each a 4-byte
    -- big-endian length and its UTF-8 bytes. Plain expressions: no query per field.
    stream_b bytea := convert_to(p_stream, 'UTF8');
    at_b bytea;
    prefix bytea;
    version_b bytea;
    type_b bytea;
    actor_b bytea;
    data_b bytea;
    canonical bytea;
    positions bigint[] := '{{}}';
    pos bigint;
BEGIN
    -- Streams that are a projection's (or a grant's, or a token's) are written only with their
    -- rows, so a row never falls behind its stream.
    IF p_stream ~ '^(approval|call|reviewer|grant|token):' AND NOT is_owner THEN
        RAISE EXCEPTION '% events are written with their rows, not appended alone', p_stream
            USING ERRCODE = 'SG401',
                  DETAIL = json_build_object('login', session_user::text, 'type',
                                             p_types[1])::text;
    END IF;
    IF n IS NULL OR n = 0 OR n <> cardinality(p_data) OR n <> cardinality(p_actors)
            OR p_stream IS NULL OR p_expected IS NULL OR p_expected < 0 THEN
        RAISE EXCEPTION 'an append needs a stream, a version and as many types, data and actors'
            USING ERRCODE = '22023';
    END IF;
    IF NOT is_owner THEN
        SELECT x.t INTO refused FROM unnest(p_types, p_data) AS x(t, d)
        WHERE x.t IS NULL OR NOT EXISTS (
            SELECT FROM event_rights r
            WHERE x.t LIKE r.type_pattern AND pg_has_role(session_user, r.role, 'MEMBER')
              AND (r.when_field = ''
                   OR jsonb_typeof(x.d::jsonb -> r.when_field) = 'object'))
        LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION '% may not append % events', session_user, coalesce(refused, 'null')
                USING ERRCODE = 'SG401',
                      DETAIL = json_build_object('login', session_user::text,
                                                 'type', refused)::text;
        END IF;
    END IF;
    at_b := convert_to(to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), 'UTF8');
    prefix := convert_to('signoff.event.v1', 'UTF8') || int4send(octet_length(stream_b))
        || stream_b;
    SELECT version, hash INTO head_version, head_hash
        FROM events WHERE stream_id = p_stream ORDER BY version DESC LIMIT 1;
    IF NOT FOUND THEN
        head_version := 0;
        head_hash := decode(repeat('00', 32), 'hex');
    END IF;
    FOR i IN 1 .. n LOOP
        IF head_version = p_expected THEN
            version_b := convert_to((p_expected + i)::text, 'UTF8');
            type_b := convert_to(p_types[i], 'UTF8');
            actor_b := convert_to(p_actors[i], 'UTF8');
            data_b := convert_to(p_data[i]::text, 'UTF8');
            canonical := prefix || int4send(octet_length(version_b)) || version_b
                || int4send(octet_length(type_b)) || type_b
                || int4send(octet_length(actor_b)) || actor_b
                || int4send(octet_length(at_b)) || at_b
                || int4send(octet_length(data_b)) || data_b;
            head_hash := sha256(head_hash || canonical);
            pos := NULL;
            -- Only the first insert can meet a racing append (see 0006).
            INSERT INTO events (txid, stream_id, version, type, data, actor, recorded_at, hash)
                VALUES (pg_current_xact_id(), p_stream, p_expected + i, p_types[i], p_data[i],
                        p_actors[i], at, head_hash)
                ON CONFLICT (stream_id, version) DO NOTHING
                RETURNING position INTO pos;
            IF pos IS NULL THEN
                SELECT max(version) INTO head_version FROM events WHERE stream_id = p_stream;
            ELSE
                positions := positions || pos;
                CONTINUE;
            END IF;
        END IF;
        RAISE EXCEPTION 'stream % is at version %, expected %', p_stream, head_version,
                p_expected
            USING ERRCODE = 'SG409',
                  DETAIL = json_build_object('stream_id', p_stream, 'expected_version',
                      p_expected, 'actual_version', head_version)::text;
    END LOOP;
    IF p_notify IS NOT NULL THEN
        PERFORM pg_notify(p_notify, p_stream);
    END IF;
    RETURN positions;
END
$$;
"""

# RETURN QUERY keeps FOR UPDATE's lock in the caller's transaction, as the SQL bodies did.
LOCKS = f"""
CREATE OR REPLACE FUNCTION signoff_lock_call(p_run text, p_call text) RETURNS SETOF tool_calls
LANGUAGE plpgsql {_DEFINER} AS $$
BEGIN
    RETURN QUERY SELECT * FROM tool_calls WHERE run_id = p_run AND call_id = p_call FOR UPDATE;
END
$$;
CREATE OR REPLACE FUNCTION signoff_lock_once_per_run(p_run text, p_tool text)
RETURNS SETOF tool_calls
LANGUAGE plpgsql {_DEFINER} AS $$
BEGIN
    RETURN QUERY SELECT * FROM tool_calls
        WHERE run_id = p_run AND tool = p_tool AND once_per_run FOR UPDATE;
END
$$;
CREATE OR REPLACE FUNCTION signoff_lock_approval(p_id text) RETURNS SETOF approvals
LANGUAGE plpgsql {_DEFINER} AS $$
BEGIN
    RETURN QUERY SELECT * FROM approvals WHERE approval_id = p_id FOR UPDATE;
END
$$;
"""


_POSITION = "    pos bigint;\n"
_POSITION_AND_XMIN = "    pos bigint;\n    inserted_xmin xid;\n"
_RETURNING = "                RETURNING position INTO pos;\n"
_RETURNING_XMIN = "                RETURNING position, xmin INTO pos, inserted_xmin;\n"
_INSERTED = "            ELSE\n                positions := positions || pos;\n"
_INSERTED_AT_TOP_LEVEL = """            ELSE
                IF inserted_xmin::text::bigint
                        <> pg_current_xact_id()::text::bigint % 4294967296 THEN
                    RAISE EXCEPTION 'events are appended at a transaction''s top level, '
                            'not in a savepoint (stream %)', p_stream
                        USING ERRCODE = 'SG425',
                              DETAIL = json_build_object('stream_id', p_stream)::text;
                END IF;
                positions := positions || pos;
"""


def _at_top_level(sql: str) -> str:
    """`sql`'s insert of events refusing to run in a savepoint."""
    for old, new in (
        (_POSITION, _POSITION_AND_XMIN),
        (_RETURNING, _RETURNING_XMIN),
        (_INSERTED, _INSERTED_AT_TOP_LEVEL),
    ):
        if sql.count(old) != 1:
            raise RuntimeError(f"the append's text changed: {old.strip()!r}")
        sql = sql.replace(old, new)
    return sql


def _write_function() -> str:
    """0010's `signoff_write_events` alone, as CREATE OR REPLACE (which keeps its grants)."""
    text: str = load_revision(__file__, "0010_least_privilege").APPEND
    start = text.index("CREATE FUNCTION signoff_write_events(")
    end = text.index("-- What logins call:")
    return text[start:end].replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)


def upgrade() -> None:
    execute_script(_at_top_level(APPEND))
    execute_script(_at_top_level(_write_function()))
    execute_script(LOCKS)


def downgrade() -> None:
    # The texts they replace (CREATE OR REPLACE keeps the grants): 0014's append calls the
    # write function, 0010's locks are SQL.
    tokens = load_revision(__file__, "0014_api_tokens")
    execute_script(tokens._append_function().replace(tokens._GUARDED, tokens._GUARDED_WITH_TOKENS))
    landed = load_revision(__file__, "0010_least_privilege")
    execute_script(landed.LOCKS.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION"))
    execute_script(_write_function())
