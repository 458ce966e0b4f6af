"""Least privilege: every write goes through functions that check who may append what.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01

No role but the owner writes a table directly. Events are appended by `signoff_append`, and a
projection row is written with its events by `signoff_commit_approval`, `signoff_commit_call`
or `signoff_grant`; leases and waiter counts, which are not history, by their own functions.
All of them are SECURITY DEFINER with `search_path` pinned and EXECUTE revoked from PUBLIC, and:

- check each event type against `event_rights` for the login (`session_user`: who connected,
  whatever role it set); the owner may append anything;
- set the transaction id and the time themselves and compute the canonical bytes and hashes
  (ledger/canonical.py's format: tag, then six length-prefixed fields), so an event's place in
  the global order and its time are the database's word, not the caller's;
- keep the row in step with the events: the version is the stream's, a row's key must be its
  stream's, only the columns a step may change are written, and the status a row takes must be
  the one its events lead to (a worker cannot mark an approval approved or a call finished
  without the event that says so).

Call streams are `call:<run>/<call id>` with `%` and `/` in either part percent-encoded, so two
calls never share a stream; a call's row records its stream (`tool_calls.stream_id`), and rows
made before this revision keep the stream their events were written to.

LangGraph's checkpoint tables are created here (the statements of langgraph-checkpoint-postgres
3.x, recorded in its `checkpoint_migrations` table so its `setup()` has nothing left to do), so
workers need no CREATE right. They are the workers' own state, encrypted and authenticated by
Signoff's checkpointer: workers read and write them directly, the key administrator re-encrypts.
"""

from __future__ import annotations

from collections.abc import Sequence

from ledger.store.sqlscript import execute_script, load_revision

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

RIGHTS = """
CREATE TABLE event_rights (
    type_pattern text NOT NULL,  -- a LIKE pattern over event types
    role         name NOT NULL,
    when_field   text NOT NULL DEFAULT '',  -- '': always; else only events whose data has it
    PRIMARY KEY (type_pattern, role, when_field)
);
-- A worker may record the approval a sticky grant gives (`grant`: the reviewer's signed grant,
-- which every consumer checks), never a reviewer's decision.
INSERT INTO event_rights (type_pattern, role, when_field) VALUES
    ('approval.decided', 'signoff_app', 'grant');
INSERT INTO event_rights (type_pattern, role) VALUES
    ('approval.requested', 'signoff_app'),
    ('approval.consumed', 'signoff_app'),
    ('approval.expired', 'signoff_app'),
    ('approval.cancelled', 'signoff_app'),
    ('approval.decided', 'signoff_reviewer'),
    ('approval.expired', 'signoff_reviewer'),
    ('approval.cancelled', 'signoff_reviewer'),
    ('approval.granted', 'signoff_reviewer'),
    ('call.started', 'signoff_app'),
    ('call.retried', 'signoff_app'),
    ('call.succeeded', 'signoff_app'),
    ('call.failed', 'signoff_app'),
    ('call.outcome_unknown', 'signoff_app'),
    ('call.denied', 'signoff_app'),
    ('call.responded', 'signoff_app'),
    ('call.outcome_unknown', 'signoff_reviewer'),
    ('call.resolved', 'signoff_reviewer'),
    ('ledger.revealed', 'signoff_reviewer'),
    ('key.%', 'signoff_key_admin');
"""

APPEND = """
DROP FUNCTION signoff_append(text, integer, text[], json[], text[], timestamptz[], bytea[], text);
CREATE FUNCTION signoff_write_events(
    p_stream text, p_expected integer, p_types text[], p_data json[], p_actors text[],
    p_notify text
) RETURNS bigint[]
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    n integer := cardinality(p_types);
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
    positions bigint[] := '{}';
    pos bigint;
BEGIN
    IF n IS NULL OR n = 0 OR n <> cardinality(p_data) OR n <> cardinality(p_actors)
            OR p_stream IS NULL OR p_expected IS NULL OR p_expected < 0 THEN
        RAISE EXCEPTION 'an append needs a stream, a version and as many types, data and actors'
            USING ERRCODE = '22023';
    END IF;
    IF NOT pg_has_role(session_user, current_user, 'MEMBER') THEN  -- current_user: the owner
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
-- What logins call: streams that are a projection's (or a grant's) are written only with their
-- rows, by the commit functions, so a row never falls behind its stream.
CREATE FUNCTION signoff_append(
    p_stream text, p_expected integer, p_types text[], p_data json[], p_actors text[],
    p_notify text
) RETURNS bigint[]
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    IF p_stream ~ '^(approval|call|reviewer|grant):'
            AND NOT pg_has_role(session_user, current_user, 'MEMBER') THEN
        RAISE EXCEPTION '% events are written with their rows, not appended alone', p_stream
            USING ERRCODE = 'SG401',
                  DETAIL = json_build_object('login', session_user::text, 'type',
                                             p_types[1])::text;
    END IF;
    RETURN signoff_write_events(p_stream, p_expected, p_types, p_data, p_actors, p_notify);
END
$$;
"""

# The status each last event type leaves a call in (`call.resolved`: the one it names). A later
# step moves only a running call, or resolves an `outcome_unknown` one: a finished call never
# runs again, whatever its row is given.
COMMIT_CALL = """
CREATE FUNCTION signoff_commit_call(
    p_insert boolean, p_row jsonb, p_args_sealed bytea, p_result_sealed bytea,
    p_lease_seconds double precision, p_stream text, p_expected integer, p_types text[],
    p_data json[], p_actors text[], p_notify text
) RETURNS bigint[]
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    r tool_calls := jsonb_populate_record(NULL::tool_calls, p_row);
    n integer := cardinality(p_types);
    wake boolean := false;
    status_after text;
BEGIN
    status_after := CASE p_types[n]
        WHEN 'call.started' THEN 'running'
        WHEN 'call.retried' THEN 'running'
        WHEN 'call.succeeded' THEN 'succeeded'
        WHEN 'call.failed' THEN 'failed'
        WHEN 'call.outcome_unknown' THEN 'outcome_unknown'
        WHEN 'call.denied' THEN 'denied'
        WHEN 'call.responded' THEN 'responded'
        WHEN 'call.resolved' THEN p_data[n]->>'status'
    END;
    IF r.status IS DISTINCT FROM status_after THEN
        RAISE EXCEPTION 'a % event leaves call % %, not %', p_types[n], p_stream,
                coalesce(status_after, 'unchanged'), coalesce(r.status, 'null')
            USING ERRCODE = 'SG422',
                  DETAIL = json_build_object('stream_id', p_stream, 'type', p_types[n])::text;
    END IF;
    r.version := p_expected + n;
    r.lease_until := CASE WHEN r.status = 'running'
        THEN now() + make_interval(secs => least(greatest(p_lease_seconds, 1), 86400)) END;
    IF p_insert THEN
        IF p_expected <> 0 OR p_types[1] IS DISTINCT FROM 'call.started'
                OR p_stream IS DISTINCT FROM 'call:'
                    || replace(replace(r.run_id, '%', '%25'), '/', '%2F') || '/'
                    || replace(replace(r.call_id, '%', '%25'), '/', '%2F') THEN
            RAISE EXCEPTION 'a new call starts its own stream with call.started'
                USING ERRCODE = 'SG422',
                      DETAIL = json_build_object('stream_id', p_stream, 'type', p_types[1])::text;
        END IF;
        r.stream_id := p_stream;
        r.args_sealed := p_args_sealed;
        r.result_sealed := p_result_sealed;
        r.waiters := 0;
        INSERT INTO tool_calls VALUES (r.*) ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
    ELSE
        UPDATE tool_calls t SET status = r.status, attempts = r.attempts, worker_id = r.worker_id,
                lease_until = r.lease_until, result_digest = r.result_digest,
                result_sealed = coalesce(p_result_sealed, t.result_sealed),
                resolved_by = r.resolved_by, finished_at = r.finished_at, version = r.version
            WHERE t.run_id = r.run_id AND t.call_id = r.call_id AND t.version = p_expected
              AND t.stream_id = p_stream AND 'call.started' <> ALL(p_types)
              AND t.status = CASE WHEN 'call.resolved' = ANY(p_types)
                                  THEN 'outcome_unknown' ELSE 'running' END
            RETURNING t.waiters > 0 INTO wake;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
    END IF;
    RETURN signoff_write_events(p_stream, p_expected, p_types, p_data, p_actors,
                                CASE WHEN wake THEN p_notify END);
END
$$;
"""

# Reviews change only with a decision, which appends one; who decided (or closed) and who
# consumed only with the events that say so; decisions and closing only while pending; a
# consumption only once.
COMMIT_APPROVAL = """
CREATE FUNCTION signoff_commit_approval(
    p_insert boolean, p_row jsonb, p_stream text, p_expected integer, p_types text[],
    p_data json[], p_actors text[], p_notify text
) RETURNS bigint[]
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    r approvals := jsonb_populate_record(NULL::approvals, p_row);
    old approvals;
    decided boolean := 'approval.decided' = ANY(p_types);
    closed boolean := 'approval.expired' = ANY(p_types) OR 'approval.cancelled' = ANY(p_types);
    allowed text[];
BEGIN
    IF p_stream IS DISTINCT FROM 'approval:' || r.approval_id THEN
        RAISE EXCEPTION 'approval % is not the fold of stream %', r.approval_id, p_stream
            USING ERRCODE = 'SG422', DETAIL = json_build_object('stream_id', p_stream)::text;
    END IF;
    IF p_insert THEN
        IF p_expected <> 0 OR p_types[1] IS DISTINCT FROM 'approval.requested' THEN
            RAISE EXCEPTION 'a new approval starts its own stream with approval.requested'
                USING ERRCODE = 'SG422', DETAIL = json_build_object('stream_id', p_stream)::text;
        END IF;
        old.reviews := '[]';
    ELSE
        SELECT * INTO old FROM approvals
            WHERE approval_id = r.approval_id AND version = p_expected;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
    END IF;
    allowed := CASE
        WHEN decided THEN ARRAY['pending', 'approved', 'rejected', 'edited', 'responded']
        WHEN 'approval.cancelled' = ANY(p_types) THEN ARRAY['cancelled']
        WHEN 'approval.expired' = ANY(p_types) THEN ARRAY['expired']
        WHEN p_insert THEN ARRAY['pending']
        ELSE ARRAY[old.status]
    END;
    IF r.status IS NULL OR NOT r.status = ANY(allowed)
            OR ((decided OR closed) AND NOT p_insert AND old.status <> 'pending')
            OR ('approval.consumed' = ANY(p_types)
                AND (old.consumed_at IS NOT NULL OR r.consumed_at IS NULL
                     OR r.consumed_by IS NULL))
            OR jsonb_typeof(r.reviews) IS DISTINCT FROM 'array'
            OR jsonb_array_length(r.reviews) <> jsonb_array_length(old.reviews)
                + (SELECT count(*) FROM unnest(p_types) t WHERE t = 'approval.decided')
            OR (SELECT coalesce(jsonb_agg(e ORDER BY i), '[]') FROM jsonb_array_elements(r.reviews)
                WITH ORDINALITY AS x(e, i) WHERE i <= jsonb_array_length(old.reviews))
               IS DISTINCT FROM old.reviews
            OR (NOT decided AND r.reviews IS DISTINCT FROM old.reviews)
            OR (NOT (decided OR closed) AND (r.decided_by IS DISTINCT FROM old.decided_by
                                             OR r.decided_at IS DISTINCT FROM old.decided_at))
            OR ('approval.consumed' <> ALL(p_types)
                AND (r.consumed_by IS DISTINCT FROM old.consumed_by
                     OR r.consumed_at IS DISTINCT FROM old.consumed_at)) THEN
        RAISE EXCEPTION 'approval % is not what its events % make it', r.approval_id, p_types
            USING ERRCODE = 'SG422', DETAIL = json_build_object('stream_id', p_stream)::text;
    END IF;
    r.version := p_expected + cardinality(p_types);
    IF p_insert THEN
        INSERT INTO approvals VALUES (r.*) ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
    ELSE
        UPDATE approvals SET status = r.status, reviews = r.reviews, decided_by = r.decided_by,
                decided_at = r.decided_at, consumed_by = r.consumed_by,
                consumed_at = r.consumed_at, version = r.version
            WHERE approval_id = r.approval_id AND version = p_expected;
    END IF;
    RETURN signoff_write_events(p_stream, p_expected, p_types, p_data, p_actors, p_notify);
END
$$;
"""

# The reviewer directory (0009): an administrator's, so EXECUTE is the owner's alone.
COMMIT_REVIEWER = """
CREATE FUNCTION signoff_commit_reviewer(
    p_insert boolean, p_row jsonb, p_stream text, p_expected integer, p_types text[],
    p_data json[], p_actors text[], p_notify text
) RETURNS bigint[]
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    r reviewers := jsonb_populate_record(NULL::reviewers, p_row);
BEGIN
    IF p_stream IS DISTINCT FROM 'reviewer:' || r.reviewer_id THEN
        RAISE EXCEPTION 'reviewer % is not the fold of stream %', r.reviewer_id, p_stream
            USING ERRCODE = 'SG422', DETAIL = json_build_object('stream_id', p_stream)::text;
    END IF;
    r.version := p_expected + cardinality(p_types);
    IF p_insert THEN
        INSERT INTO reviewers VALUES (r.*) ON CONFLICT DO NOTHING;
    ELSE
        UPDATE reviewers SET groups = r.groups, active = r.active, changed_by = r.changed_by,
                changed_at = r.changed_at, version = r.version
            WHERE reviewer_id = r.reviewer_id AND version = p_expected;
    END IF;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    RETURN signoff_write_events(p_stream, p_expected, p_types, p_data, p_actors, p_notify);
END
$$;
"""

GRANT = """
CREATE FUNCTION signoff_grant(
    p_grant_id text, p_run text, p_tool text, p_granted_by text, p_granted_at timestamptz,
    p_expires_at timestamptz, p_data json
) RETURNS bigint[]
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
BEGIN
    INSERT INTO approval_grants (grant_id, run_id, tool, granted_by, granted_at, expires_at)
        VALUES (p_grant_id, p_run, p_tool, p_granted_by, p_granted_at, p_expires_at);
    RETURN signoff_write_events('grant:' || p_grant_id, 0, ARRAY['approval.granted'],
                                ARRAY[p_data], ARRAY[p_granted_by], NULL);
END
$$;
"""

# Leases and waiter counts are not history: no events, and only for running calls.
LEASES = """
CREATE FUNCTION signoff_renew_leases(
    p_runs text[], p_calls text[], p_versions integer[], p_seconds double precision
) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE
    renewed bigint;
BEGIN
    UPDATE tool_calls t
        SET lease_until = now() + make_interval(secs => least(greatest(p_seconds, 1), 86400))
        FROM unnest(p_runs, p_calls, p_versions) AS held(run_id, call_id, version)
        WHERE t.run_id = held.run_id AND t.call_id = held.call_id AND t.version = held.version
          AND t.status = 'running';
    GET DIAGNOSTICS renewed = ROW_COUNT;
    RETURN renewed;
END
$$;
CREATE FUNCTION signoff_count_waiter(p_run text, p_call text, p_delta integer) RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
    UPDATE tool_calls SET waiters = waiters + sign(p_delta)::integer
    WHERE run_id = p_run AND call_id = p_call AND waiters + sign(p_delta)::integer >= 0
$$;
"""

# Row locks (FOR UPDATE needs UPDATE rights, which no role but the owner has): the lock is the
# caller's transaction's, as if it had locked the row itself.
LOCKS = """
CREATE FUNCTION signoff_lock_call(p_run text, p_call text) RETURNS SETOF tool_calls
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT * FROM tool_calls WHERE run_id = p_run AND call_id = p_call FOR UPDATE
$$;
CREATE FUNCTION signoff_lock_once_per_run(p_run text, p_tool text) RETURNS SETOF tool_calls
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT * FROM tool_calls WHERE run_id = p_run AND tool = p_tool AND once_per_run FOR UPDATE
$$;
CREATE FUNCTION signoff_lock_approval(p_id text) RETURNS SETOF approvals
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT * FROM approvals WHERE approval_id = p_id FOR UPDATE
$$;
"""

CALL_STREAMS = """
ALTER TABLE tool_calls ADD COLUMN stream_id text;
UPDATE tool_calls SET stream_id = 'call:' || run_id || '/' || call_id;
ALTER TABLE tool_calls ALTER COLUMN stream_id SET NOT NULL;
"""

# langgraph-checkpoint-postgres 3.x's MIGRATIONS, as one transaction can run them.
CHECKPOINTS = """
CREATE TABLE IF NOT EXISTS checkpoint_migrations (v INTEGER PRIMARY KEY);
CREATE TABLE IF NOT EXISTS checkpoints (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL DEFAULT '',
    checkpoint_id TEXT NOT NULL,
    parent_checkpoint_id TEXT,
    type TEXT,
    checkpoint JSONB NOT NULL,
    metadata JSONB NOT NULL DEFAULT '{}',
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)
);
CREATE TABLE IF NOT EXISTS checkpoint_blobs (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL DEFAULT '',
    channel TEXT NOT NULL,
    version TEXT NOT NULL,
    type TEXT NOT NULL,
    blob BYTEA,
    PRIMARY KEY (thread_id, checkpoint_ns, channel, version)
);
CREATE TABLE IF NOT EXISTS checkpoint_writes (
    thread_id TEXT NOT NULL,
    checkpoint_ns TEXT NOT NULL DEFAULT '',
    checkpoint_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    channel TEXT NOT NULL,
    type TEXT,
    blob BYTEA NOT NULL,
    PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
);
ALTER TABLE checkpoint_blobs ALTER COLUMN blob DROP NOT NULL;
CREATE INDEX IF NOT EXISTS checkpoints_thread_id_idx ON checkpoints(thread_id);
CREATE INDEX IF NOT EXISTS checkpoint_blobs_thread_id_idx ON checkpoint_blobs(thread_id);
CREATE INDEX IF NOT EXISTS checkpoint_writes_thread_id_idx ON checkpoint_writes(thread_id);
ALTER TABLE checkpoint_writes ADD COLUMN IF NOT EXISTS task_path TEXT NOT NULL DEFAULT '';
INSERT INTO checkpoint_migrations (v) SELECT generate_series(0, 9) ON CONFLICT DO NOTHING;
"""

FUNCTIONS = (
    "signoff_append(text, integer, text[], json[], text[], text)",
    "signoff_write_events(text, integer, text[], json[], text[], text)",
    "signoff_commit_call(boolean, jsonb, bytea, bytea, double precision, text, integer, text[],"
    " json[], text[], text)",
    "signoff_commit_approval(boolean, jsonb, text, integer, text[], json[], text[], text)",
    "signoff_grant(text, text, text, text, timestamptz, timestamptz, json)",
    "signoff_renew_leases(text[], text[], integer[], double precision)",
    "signoff_count_waiter(text, text, integer)",
    "signoff_lock_call(text, text)",
    "signoff_lock_once_per_run(text, text)",
    "signoff_lock_approval(text)",
    "signoff_commit_reviewer(boolean, jsonb, text, integer, text[], json[], text[], text)",
)
_APPEND, _WRITE, _CALL, _APPROVAL, _GRANT, _RENEW, _WAITER, *_LOCKS, _REVIEWER = FUNCTIONS
_ROLES = "signoff_app, signoff_reviewer, signoff_key_admin, signoff_auditor"
_CHECKPOINT_TABLES = "checkpoints, checkpoint_blobs, checkpoint_writes"

GRANTS = f"""
REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON ALL TABLES IN SCHEMA public FROM {_ROLES};
GRANT SELECT ON events, approvals, approval_grants, tool_calls, data_keys, event_rights
    TO signoff_app, signoff_reviewer;
GRANT SELECT ON events, data_keys, event_rights TO signoff_key_admin;
{"".join(f"REVOKE EXECUTE ON FUNCTION {f} FROM PUBLIC;" for f in FUNCTIONS)}
GRANT EXECUTE ON FUNCTION {_APPEND} TO signoff_app, signoff_reviewer, signoff_key_admin;
GRANT EXECUTE ON FUNCTION {_CALL}, {_APPROVAL} TO signoff_app, signoff_reviewer;
GRANT EXECUTE ON FUNCTION {_GRANT} TO signoff_reviewer;
GRANT EXECUTE ON FUNCTION {_RENEW}, {_WAITER} TO signoff_app;
GRANT EXECUTE ON FUNCTION {", ".join(_LOCKS)} TO signoff_app, signoff_reviewer;
GRANT SELECT, INSERT, UPDATE, DELETE ON {_CHECKPOINT_TABLES} TO signoff_app;
GRANT SELECT, UPDATE ON {_CHECKPOINT_TABLES} TO signoff_key_admin;
GRANT SELECT ON checkpoint_migrations TO signoff_app, signoff_key_admin;
"""


def upgrade() -> None:
    for script in (RIGHTS, APPEND, CALL_STREAMS, COMMIT_CALL, COMMIT_APPROVAL):
        execute_script(script)
    for script in (COMMIT_REVIEWER, GRANT):
        execute_script(script)
    execute_script(LEASES)
    execute_script(LOCKS)
    execute_script(CHECKPOINTS)
    execute_script(GRANTS)


# The checkpoint tables go only when they are empty: they hold the agents' state (LangGraph's
# setup() made them before this revision, and makes them again). The rights of 0001-0004 and
# 0006's append function come back.
DROP_EMPTY_CHECKPOINTS = f"""
DO $$ BEGIN
    IF NOT EXISTS (SELECT FROM checkpoints) AND NOT EXISTS (SELECT FROM checkpoint_blobs)
            AND NOT EXISTS (SELECT FROM checkpoint_writes) THEN
        DROP TABLE {_CHECKPOINT_TABLES}, checkpoint_migrations;
    ELSE
        REVOKE ALL ON {_CHECKPOINT_TABLES}, checkpoint_migrations FROM signoff_app,
            signoff_key_admin;
    END IF;
END $$;
"""


def downgrade() -> None:
    previous = load_revision(__file__, "0006_typed_conflicts")
    execute_script(DROP_EMPTY_CHECKPOINTS)
    execute_script(
        f"""
        {"".join(f"DROP FUNCTION {f};" for f in _LOCKS)}
        DROP FUNCTION {_RENEW}; DROP FUNCTION {_WAITER}; DROP FUNCTION {_GRANT};
        DROP FUNCTION {_REVIEWER};
        DROP FUNCTION {_APPROVAL}; DROP FUNCTION {_CALL}; DROP FUNCTION {_APPEND};
        DROP FUNCTION {_WRITE};
        DROP TABLE event_rights;
        ALTER TABLE tool_calls DROP COLUMN stream_id;
        """
    )
    execute_script(previous.APPEND.replace("CREATE OR REPLACE", "CREATE", 1))
    execute_script(
        """
        GRANT SELECT, INSERT ON events TO signoff_app;
        GRANT INSERT ON events TO signoff_key_admin;
        GRANT EXECUTE ON FUNCTION signoff_append(text, integer, text[], json[], text[],
            timestamptz[], bytea[], text) TO signoff_app, signoff_key_admin;
        GRANT SELECT, INSERT, UPDATE ON approvals, approval_grants, tool_calls TO signoff_app;
        REVOKE SELECT ON approvals, approval_grants, tool_calls FROM signoff_reviewer,
            signoff_key_admin;
        REVOKE SELECT ON events FROM signoff_reviewer;
        """
    )
