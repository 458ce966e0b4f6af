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
- the lease is computed in the statement that writes the row, not in a variable;
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
from importlib import import_module

from migrations.sqlscript import execute_script

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

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
_BAD_ARGUMENTS = """n IS NULL OR n = 0 OR n <> cardinality(p_data) OR n <> cardinality(p_actors)
            OR p_stream IS NULL OR p_expected IS NULL OR p_expected < 0"""
_BAD_NEW_STREAM = """p_insert AND (p_expected <> 0 OR p_types[1] IS DISTINCT FROM 'call.started'
                OR p_stream IS DISTINCT FROM 'call:'
                    || replace(replace(p_run_id, '%', '%25'), '/', '%2F') || '/'
                    || replace(replace(p_call_id, '%', '%25'), '/', '%2F'))"""
_LEASE = """CASE WHEN p_status = 'running'
                THEN now() + make_interval(secs => least(greatest(p_lease_seconds, 1), 86400))
                END"""


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

COMMIT_CALL = f"""
CREATE OR REPLACE FUNCTION signoff_commit_call(
    p_insert boolean, p_run_id text, p_call_id text, p_tool text, p_effect text,
    p_once_per_run boolean, p_request_digest text, p_args_digest text, p_idempotency_key text,
    p_approval_id text, p_status text, p_attempts integer, p_worker_id text,
    p_result_digest text, p_resolved_by text, p_started_at timestamptz,
    p_finished_at timestamptz, p_approved_by text[], p_approval_stream text,
    p_args_sealed bytea, p_result_sealed bytea, p_lease_seconds double precision,
    p_stream text, p_expected integer, p_types text[], p_data json[], p_actors text[],
    p_notify text
) RETURNS bigint[]
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    n integer := cardinality(p_types);
    at timestamptz := clock_timestamp();
    refused text;
    head_hash bytea;
    head_version integer;
    positions bigint[];
    pos bigint;
    top_level boolean;
    wake boolean;
    a approvals;
BEGIN
    IF {_BAD_ARGUMENTS} THEN
        RAISE EXCEPTION 'an append needs a stream, a version and as many types, data and actors'
            USING ERRCODE = '22023';
    END IF;
    -- current_user: the owner, whose appends are not checked.
    IF NOT pg_has_role(session_user, current_user, 'MEMBER') THEN
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
    IF p_status IS DISTINCT FROM {_STATUS_AFTER} OR {_BAD_NEW_STREAM} THEN
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
        -- The approval it names, in this transaction's view (its consumption is in this
        -- transaction, just before).
        IF p_approval_id IS NOT NULL OR p_approval_stream IS NOT NULL
                OR cardinality(p_approved_by) > 0 THEN
            SELECT * INTO a FROM approvals WHERE approval_id = p_approval_id;
            IF NOT FOUND OR a.consumed_at IS NULL OR a.run_id <> p_run_id
                    OR a.call_id <> p_call_id
                    OR p_approval_stream IS DISTINCT FROM 'approval:' || a.approval_id
                    OR p_approved_by IS DISTINCT FROM (CASE
                        WHEN a.status IN ('approved', 'edited') THEN coalesce(a.decided_by, '{{}}')
                        ELSE '{{}}' END) THEN
                RAISE EXCEPTION 'call % does not carry what approval % decided', p_stream,
                        coalesce(p_approval_id, 'null')
                    USING ERRCODE = 'SG422',
                          DETAIL = json_build_object('stream_id', p_stream,
                                                     'type', p_types[1])::text;
            END IF;
        END IF;
        INSERT INTO tool_calls (run_id, call_id, tool, effect, once_per_run, request_digest,
                args_digest, args_sealed, idempotency_key, approval_id, status, attempts,
                worker_id, lease_until, result_digest, result_sealed, resolved_by, started_at,
                finished_at, waiters, version, approved_by, approval_stream, stream_id)
            VALUES (p_run_id, p_call_id, p_tool, p_effect, p_once_per_run, p_request_digest,
                p_args_digest, p_args_sealed, p_idempotency_key, p_approval_id, p_status,
                p_attempts, p_worker_id, {_LEASE}, p_result_digest, p_result_sealed,
                p_resolved_by, p_started_at, p_finished_at, 0, n, p_approved_by,
                p_approval_stream, p_stream)
            ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
        -- A new stream starts from the genesis hash (head_hash NULL below).
    ELSE
        UPDATE tool_calls t SET status = p_status, attempts = p_attempts,
                worker_id = p_worker_id, lease_until = {_LEASE},
                result_digest = p_result_digest,
                result_sealed = coalesce(p_result_sealed, t.result_sealed),
                resolved_by = p_resolved_by, finished_at = p_finished_at,
                version = p_expected + n
            WHERE t.run_id = p_run_id AND t.call_id = p_call_id AND t.version = p_expected
              AND t.stream_id = p_stream AND 'call.started' <> ALL(p_types)
              AND t.status = CASE WHEN 'call.resolved' = ANY(p_types)
                                  THEN 'outcome_unknown' ELSE 'running' END
            RETURNING t.waiters > 0 INTO wake;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
        -- The head the row was fenced at; none when the stream is not where the row is.
        SELECT hash INTO head_hash FROM events WHERE stream_id = p_stream AND version = p_expected;
    END IF;
    IF FOUND THEN
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
                EXIT WHEN pos IS NULL;
                RAISE EXCEPTION 'events are appended at a transaction''s top level, '
                        'not in a savepoint (stream %)', p_stream
                    USING ERRCODE = 'SG425',
                          DETAIL = json_build_object('stream_id', p_stream)::text;
            END IF;
            positions := positions || pos;
        END LOOP;
    END IF;
    IF cardinality(positions) IS DISTINCT FROM n THEN
        SELECT coalesce(max(version), 0) INTO head_version FROM events WHERE stream_id = p_stream;
        RAISE EXCEPTION 'stream % is at version %, expected %', p_stream, head_version,
                p_expected
            USING ERRCODE = 'SG409',
                  DETAIL = json_build_object('stream_id', p_stream, 'expected_version',
                      p_expected, 'actual_version', head_version)::text;
    END IF;
    IF wake AND p_notify IS NOT NULL THEN
        PERFORM pg_notify(p_notify, p_stream);
    END IF;
    RETURN positions;
END
$$;
"""


def upgrade() -> None:
    execute_script(COMMIT_CALL)


def downgrade() -> None:
    before = import_module("migrations.versions.0018_hot_path")
    text = before.COMMIT_CALL.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
    execute_script(text.replace("'signoff.event.v1'", f"'{TAG}'"))
