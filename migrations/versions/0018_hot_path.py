"""A tool call's steps cost what they did before decisions were signed: same checks, less work.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-01

Measured with the server's instruction counts (callgrind on a single-user backend, the
statements of `ToolLedger.execute` replayed), three costs that no guarantee needs:

- **CHECK constraints are parsed again by every statement that writes the row.** PostgreSQL
  keeps a table's CHECK expressions as text and turns them into expression trees once per
  statement; the five on `events` and two on `tool_calls` were a fifth of a call's work. The
  same rules now live in domains (`signoff_stream_id`, ...), whose checks PostgreSQL keeps
  parsed for the whole session. Every value the tables accepted or refused is still accepted
  or refused, and by the database, whoever writes. Changing a column to a domain over its
  own type rewrites nothing: the domains are created without a check, the columns moved onto
  them, and the checks added afterwards, NOT VALID: the rows met the very same CHECKs a moment
  before, in this transaction, so scanning a large journal again would prove nothing. The
  audit views that read those columns are made again with the same text and grant.
- **The row came as JSON** (`jsonb_populate_record`): a call's fields are now typed parameters
  of `signoff_commit_call`, which writes them as they are.
- **The commit called the write function, another SECURITY DEFINER function**, paying the
  switch of user and `search_path` twice. `signoff_commit_call` appends its events itself;
  what it checks and writes is `signoff_write_events`'s (0015), with the event rights of the
  login, the top-level check and the version fence. A new call's stream starts at version 0,
  so its head is the genesis hash without a query; a later step reads the head it was fenced
  at (`version = p_expected`) instead of the latest, which is the same row when the fence
  holds, and no row (a refusal) when it does not.

The downgrade puts back 0013's `signoff_commit_call` and the CHECK constraints.
"""

from __future__ import annotations

from collections.abc import Sequence

from ledger.store.sqlscript import execute_script, load_revision

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# (table, column, domain, base type, its check), in the order of the old constraints.
DOMAINS = (
    ("events", "stream_id", "signoff_stream_id", "text", "VALUE <> '' AND length(VALUE) <= 200"),
    ("events", "version", "signoff_event_version", "integer", "VALUE > 0"),
    ("events", "type", "signoff_event_type", "text", "VALUE <> '' AND length(VALUE) <= 100"),
    ("events", "actor", "signoff_actor", "text", "VALUE <> '' AND length(VALUE) <= 200"),
    ("events", "hash", "signoff_hash", "bytea", "length(VALUE) = 32"),
    (
        "tool_calls",
        "effect",
        "signoff_call_effect",
        "text",
        "VALUE IN ('read', 'idempotent_write', 'single_attempt')",
    ),
    (
        "tool_calls",
        "status",
        "signoff_call_status",
        "text",
        "VALUE IN ('running', 'succeeded', 'failed', 'outcome_unknown', 'denied', 'responded')",
    ),
    (
        "approvals",
        "status",
        "signoff_approval_status",
        "text",
        "VALUE IN ('pending', 'approved', 'rejected', 'edited', 'responded', 'expired',"
        " 'cancelled')",
    ),
)
# The views over those columns, made again with their own text and grant.
VIEWS = ("audit_events", "audit_tool_calls", "audit_approvals")

_EVENTS = "text, integer, text[], json[], text[], text"
OLD_CALL = f"signoff_commit_call(boolean, jsonb, bytea, bytea, double precision, {_EVENTS})"
CALL = (
    "signoff_commit_call(boolean, text, text, text, text, boolean, text, text, text, text, text,"
    " integer, text, text, text, timestamptz, timestamptz, text[], text, bytea, bytea,"
    f" double precision, {_EVENTS})"
)
OLD_APPROVAL = f"signoff_commit_approval(boolean, jsonb, {_EVENTS})"
APPROVAL = (
    "signoff_commit_approval(boolean, text, text, text, text, text, text, text, text, text,"
    " jsonb, text, jsonb, text[], timestamptz, timestamptz, text, timestamptz, jsonb,"
    f" timestamptz, {_EVENTS})"
)
# (the function now, the one it replaces): both are granted to workers and reviewers.
REPLACED = ((CALL, OLD_CALL), (APPROVAL, OLD_APPROVAL))

# What both commit functions do around their row, as `signoff_write_events` (0015) did it.
_DECLARE_APPEND = """
    n integer := cardinality(p_types);
    refused text;
    head_hash bytea;
    head_version integer;
    at timestamptz := clock_timestamp();
    -- The canonical bytes of ledger/canonical.py: the tag, then six fields, each a 4-byte
    -- big-endian length and its UTF-8 bytes.
    prefix bytea;
    at_b bytea;
    version_b bytea;
    type_b bytea;
    actor_b bytea;
    data_b bytea;
    positions bigint[] := '{}';
    pos bigint;
    inserted_xmin xid;
"""
_CHECK_APPEND = """
    IF n IS NULL OR n = 0 OR n <> cardinality(p_data) OR n <> cardinality(p_actors)
            OR p_stream IS NULL OR p_expected IS NULL OR p_expected < 0 THEN
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
"""
# A stream not at the version a step expected.
_REFUSE_CONFLICT = """\
        SELECT coalesce(max(version), 0) INTO head_version FROM events WHERE stream_id = p_stream;
        RAISE EXCEPTION 'stream % is at version %, expected %', p_stream, head_version,
                p_expected
            USING ERRCODE = 'SG409',
                  DETAIL = json_build_object('stream_id', p_stream, 'expected_version',
                      p_expected, 'actual_version', head_version)::text;
"""
# After the row: a new row's stream starts from the genesis hash; a later step's from the head
# its row was fenced at (none when the stream is not where the row is: a refusal below).
_APPEND = (
    """
    IF p_insert THEN
        head_version := 0;
        head_hash := '\\x0000000000000000000000000000000000000000000000000000000000000000';
    ELSE
        SELECT version, hash INTO head_version, head_hash
            FROM events WHERE stream_id = p_stream AND version = p_expected;
    END IF;
    at_b := convert_to(to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), 'UTF8');
    prefix := convert_to('signoff.event.v1', 'UTF8')
        || int4send(octet_length(convert_to(p_stream, 'UTF8'))) || convert_to(p_stream, 'UTF8');
    FOR i IN 1 .. n LOOP
        IF head_version IS NOT DISTINCT FROM p_expected THEN
            version_b := convert_to((p_expected + i)::text, 'UTF8');
            type_b := convert_to(p_types[i], 'UTF8');
            actor_b := convert_to(p_actors[i], 'UTF8');
            data_b := convert_to(p_data[i]::text, 'UTF8');
            head_hash := sha256(head_hash || prefix
                || int4send(octet_length(version_b)) || version_b
                || int4send(octet_length(type_b)) || type_b
                || int4send(octet_length(actor_b)) || actor_b
                || int4send(octet_length(at_b)) || at_b
                || int4send(octet_length(data_b)) || data_b);
            pos := NULL;
            INSERT INTO events (txid, stream_id, version, type, data, actor, recorded_at, hash)
                VALUES (pg_current_xact_id(), p_stream, p_expected + i, p_types[i], p_data[i],
                        p_actors[i], at, head_hash)
                ON CONFLICT (stream_id, version) DO NOTHING
                RETURNING position, xmin INTO pos, inserted_xmin;
            IF pos IS NOT NULL THEN
                -- In a savepoint the row's xmin is the savepoint's, which `ledger verify`
                -- cannot tell from a forged txid (0015).
                IF inserted_xmin::text::bigint
                        <> pg_current_xact_id()::text::bigint % 4294967296 THEN
                    RAISE EXCEPTION 'events are appended at a transaction''s top level, '
                            'not in a savepoint (stream %)', p_stream
                        USING ERRCODE = 'SG425',
                              DETAIL = json_build_object('stream_id', p_stream)::text;
                END IF;
                positions := positions || pos;
                CONTINUE;
            END IF;
        END IF;
"""
    + _REFUSE_CONFLICT
    + """    END LOOP;
    IF {notify_when} THEN
        PERFORM pg_notify(p_notify, p_stream);
    END IF;
    RETURN positions;
END
$$;
"""
)
_EVENTS_PARAMETERS = """
    p_stream text, p_expected integer, p_types text[], p_data json[], p_actors text[],
    p_notify text
) RETURNS bigint[]
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
DECLARE"""

_CALL_PARAMETERS = """
    p_insert boolean, p_run_id text, p_call_id text, p_tool text, p_effect text,
    p_once_per_run boolean, p_request_digest text, p_args_digest text, p_idempotency_key text,
    p_approval_id text, p_status text, p_attempts integer, p_worker_id text,
    p_result_digest text, p_resolved_by text, p_started_at timestamptz,
    p_finished_at timestamptz, p_approved_by text[], p_approval_stream text,
    p_args_sealed bytea, p_result_sealed bytea, p_lease_seconds double precision,"""
# A new call's row, after the approval it names is checked; a later step's. Each returns NULL
# when it wrote nothing (a call started already; a row not at the step's version and status).
_NEW_CALL_ROW = """\
        -- The approval it names, in this transaction's view (its consumption is in this
        -- transaction, just before).
        IF p_approval_id IS NOT NULL OR p_approval_stream IS NOT NULL
                OR cardinality(p_approved_by) > 0 THEN
            SELECT * INTO a FROM approvals WHERE approval_id = p_approval_id;
            IF NOT FOUND OR a.consumed_at IS NULL OR a.run_id <> p_run_id
                    OR a.call_id <> p_call_id
                    OR p_approval_stream IS DISTINCT FROM 'approval:' || a.approval_id
                    OR p_approved_by IS DISTINCT FROM (CASE
                        WHEN a.status IN ('approved', 'edited') THEN coalesce(a.decided_by, '{}')
                        ELSE '{}' END) THEN
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
                p_attempts, p_worker_id, lease, p_result_digest, p_result_sealed, p_resolved_by,
                p_started_at, p_finished_at, 0, n, p_approved_by, p_approval_stream, p_stream)
            ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
"""
_LATER_STEP_ROW = """\
        UPDATE tool_calls t SET status = p_status, attempts = p_attempts,
                worker_id = p_worker_id, lease_until = lease, result_digest = p_result_digest,
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
"""
# The status each last event type leaves a call in (`call.resolved`: the one it names). A later
# step moves only a running call, or resolves an `outcome_unknown` one: a finished call never
# runs again, whatever it is given.
COMMIT_CALL = (
    "\nCREATE FUNCTION signoff_commit_call("
    + _CALL_PARAMETERS
    + _EVENTS_PARAMETERS
    + _DECLARE_APPEND
    + """    wake boolean := false;
    status_after text;
    lease timestamptz;
    a approvals;
BEGIN"""
    + _CHECK_APPEND
    + """    status_after := CASE p_types[n]
        WHEN 'call.started' THEN 'running'
        WHEN 'call.retried' THEN 'running'
        WHEN 'call.succeeded' THEN 'succeeded'
        WHEN 'call.failed' THEN 'failed'
        WHEN 'call.outcome_unknown' THEN 'outcome_unknown'
        WHEN 'call.denied' THEN 'denied'
        WHEN 'call.responded' THEN 'responded'
        WHEN 'call.resolved' THEN p_data[n]->>'status'
    END;
    IF p_status IS DISTINCT FROM status_after THEN
        RAISE EXCEPTION 'a % event leaves call % %, not %', p_types[n], p_stream,
                coalesce(status_after, 'unchanged'), coalesce(p_status, 'null')
            USING ERRCODE = 'SG422',
                  DETAIL = json_build_object('stream_id', p_stream, 'type', p_types[n])::text;
    END IF;
    lease := CASE WHEN p_status = 'running'
        THEN now() + make_interval(secs => least(greatest(p_lease_seconds, 1), 86400)) END;
    IF p_insert THEN
        IF p_expected <> 0 OR p_types[1] IS DISTINCT FROM 'call.started'
                OR p_stream IS DISTINCT FROM 'call:'
                    || replace(replace(p_run_id, '%', '%25'), '/', '%2F') || '/'
                    || replace(replace(p_call_id, '%', '%25'), '/', '%2F') THEN
            RAISE EXCEPTION 'a new call starts its own stream with call.started'
                USING ERRCODE = 'SG422',
                      DETAIL = json_build_object('stream_id', p_stream, 'type', p_types[1])::text;
        END IF;
"""
    + _NEW_CALL_ROW
    + """    ELSE
"""
    + _LATER_STEP_ROW
    + """    END IF;"""
    + _APPEND.replace("{notify_when}", "wake AND p_notify IS NOT NULL")
)

# Reviews change only with a decision, which appends one; who decided (or closed) and who
# consumed only with the events that say so; decisions and closing only while pending; a
# consumption only once: 0010's rules, on typed parameters, with the reviews' prefix compared by
# plain expressions rather than a query over them.
COMMIT_APPROVAL = (
    """
CREATE FUNCTION signoff_commit_approval(
    p_insert boolean, p_approval_id text, p_run_id text, p_thread_id text, p_tool text,
    p_kind text, p_call_id text, p_args_digest text, p_binding text, p_requested_by text,
    p_policy jsonb, p_status text, p_reviews jsonb, p_decided_by text[],
    p_decided_at timestamptz, p_expires_at timestamptz, p_consumed_by text,
    p_consumed_at timestamptz, p_thread_config jsonb, p_requested_at timestamptz,"""
    + _EVENTS_PARAMETERS
    + _DECLARE_APPEND
    + """    old approvals;
    decisions integer := cardinality(array_positions(p_types, 'approval.decided'));
    decided boolean := decisions > 0;
    earlier jsonb;
    closed boolean := 'approval.expired' = ANY(p_types) OR 'approval.cancelled' = ANY(p_types);
    allowed text[];
BEGIN"""
    + _CHECK_APPEND
    + """    IF p_stream IS DISTINCT FROM 'approval:' || p_approval_id THEN
        RAISE EXCEPTION 'approval % is not the fold of stream %', p_approval_id, p_stream
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
            WHERE approval_id = p_approval_id AND version = p_expected;
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
    IF p_status IS NULL OR NOT p_status = ANY(allowed)
            OR ((decided OR closed) AND NOT p_insert AND old.status <> 'pending')
            OR ('approval.consumed' = ANY(p_types)
                AND (old.consumed_at IS NOT NULL OR p_consumed_at IS NULL
                     OR p_consumed_by IS NULL))
            OR jsonb_typeof(p_reviews) IS DISTINCT FROM 'array'
            OR jsonb_array_length(p_reviews) <> jsonb_array_length(old.reviews) + decisions
            OR (NOT decided AND p_reviews IS DISTINCT FROM old.reviews)
            OR (NOT (decided OR closed) AND (p_decided_by IS DISTINCT FROM old.decided_by
                                             OR p_decided_at IS DISTINCT FROM old.decided_at))
            OR ('approval.consumed' <> ALL(p_types)
                AND (p_consumed_by IS DISTINCT FROM old.consumed_by
                     OR p_consumed_at IS DISTINCT FROM old.consumed_at)) THEN
        RAISE EXCEPTION 'approval % is not what its events % make it', p_approval_id, p_types
            USING ERRCODE = 'SG422', DETAIL = json_build_object('stream_id', p_stream)::text;
    END IF;
    -- Decisions append reviews and change none: without its last `decisions` reviews (jsonb
    -- `- -1` drops the last element), the row's are the ones it had. Plain expressions, not a
    -- query: no plan to start for every step.
    earlier := p_reviews;
    FOR k IN 1 .. decisions LOOP
        earlier := earlier - (-1);
    END LOOP;
    IF earlier IS DISTINCT FROM old.reviews THEN
        RAISE EXCEPTION 'approval % is not what its events % make it', p_approval_id, p_types
            USING ERRCODE = 'SG422', DETAIL = json_build_object('stream_id', p_stream)::text;
    END IF;
    IF p_insert THEN
        INSERT INTO approvals (approval_id, run_id, thread_id, tool, kind, call_id, args_digest,
                binding, requested_by, policy, status, reviews, decided_by, decided_at,
                expires_at, consumed_by, consumed_at, thread_config, requested_at, version)
            VALUES (p_approval_id, p_run_id, p_thread_id, p_tool, p_kind, p_call_id,
                p_args_digest, p_binding, p_requested_by, p_policy, p_status, p_reviews,
                p_decided_by, p_decided_at, p_expires_at, p_consumed_by, p_consumed_at,
                p_thread_config, p_requested_at, n)
            ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
    ELSE
        -- A racing step moved the row after `old` was read: its event holds the version, so
        -- the append below is refused (SG409) and this transaction writes nothing.
        UPDATE approvals SET status = p_status, reviews = p_reviews, decided_by = p_decided_by,
                decided_at = p_decided_at, consumed_by = p_consumed_by,
                consumed_at = p_consumed_at, version = p_expected + n
            WHERE approval_id = p_approval_id AND version = p_expected;
    END IF;"""
    + _APPEND.replace("{notify_when}", "p_notify IS NOT NULL")
)


def _domains_sql() -> str:
    """Columns onto domains of their own type (no rewrite), the old CHECKs dropped, the domains'
    checks added; the views over those columns made again as they were."""
    create = "".join(f"CREATE DOMAIN {d} AS {base};\n" for _, _, d, base, _ in DOMAINS)
    tables: dict[str, list[str]] = {}
    for table, column, domain, _, _ in DOMAINS:
        tables.setdefault(table, []).append(
            f"DROP CONSTRAINT {table}_{column}_check, ALTER COLUMN {column} TYPE {domain}"
        )
    alter = "".join(f"ALTER TABLE {t} {', '.join(parts)};\n" for t, parts in tables.items())
    checks = "".join(
        f"ALTER DOMAIN {d} ADD CONSTRAINT {d}_check CHECK ({check}) NOT VALID;\n"
        for _, _, d, _, check in DOMAINS
    )
    return create + _views_kept(alter) + checks


def _checks_sql() -> str:
    """The downgrade: the columns back on their base types and the CHECKs back on the tables."""
    tables: dict[str, list[str]] = {}
    for table, column, _, base, check in DOMAINS:
        tables.setdefault(table, []).append(
            f"ALTER COLUMN {column} TYPE {base}, ADD CONSTRAINT {table}_{column}_check"
            f" CHECK ({check.replace('VALUE', column)})"
        )
    alter = "".join(f"ALTER TABLE {t} {', '.join(parts)};\n" for t, parts in tables.items())
    drop = "".join(f"DROP DOMAIN {d};\n" for _, _, d, _, _ in DOMAINS)
    return _views_kept(alter) + drop


def _views_kept(sql: str) -> str:
    """`sql` run with the audit views dropped around it and made again with their text and
    their grants."""
    saved = ", ".join(
        f"('{v}', pg_get_viewdef('{v}'::regclass), "
        f"(SELECT relacl FROM pg_class WHERE oid = '{v}'::regclass))"
        for v in VIEWS
    )
    escaped = sql.replace("'", "''")
    return f"""
DO $views$
DECLARE
    v record;
    grantee record;
BEGIN
    CREATE TEMPORARY TABLE signoff_saved_views ON COMMIT DROP AS
        SELECT * FROM (VALUES {saved}) AS s(name, definition, acl);
    FOR v IN SELECT name FROM signoff_saved_views LOOP
        EXECUTE format('DROP VIEW %I', v.name);
    END LOOP;
    EXECUTE '{escaped}';
    FOR v IN SELECT * FROM signoff_saved_views LOOP
        EXECUTE format('CREATE VIEW %I AS %s', v.name, v.definition);
        FOR grantee IN SELECT a.grantee::regrole::text AS role, a.privilege_type AS privilege
                FROM aclexplode(v.acl) a
                WHERE a.grantee <> 0 AND a.grantee <> a.grantor LOOP
            EXECUTE format('GRANT %s ON %I TO %I', grantee.privilege, v.name, grantee.role);
        END LOOP;
    END LOOP;
END
$views$;
"""


def _granted(function: str) -> str:
    return (
        f"REVOKE EXECUTE ON FUNCTION {function} FROM PUBLIC;\n"
        f"GRANT EXECUTE ON FUNCTION {function} TO signoff_app, signoff_reviewer;\n"
    )


def upgrade() -> None:
    execute_script(_domains_sql())
    for (_, old), text in zip(REPLACED, (COMMIT_CALL, COMMIT_APPROVAL), strict=True):
        execute_script(f"DROP FUNCTION {old};\n{text}")
    for function, _ in REPLACED:
        execute_script(_granted(function))


def downgrade() -> None:
    landed = load_revision(__file__, "0013_calls_bound_to_approvals")
    previous = load_revision(__file__, "0010_least_privilege")
    call = landed._replaced(previous.COMMIT_CALL, landed._DECLARED, landed._DECLARED_WITH_APPROVAL)
    call = landed._replaced(call, landed._INSERTED, landed._APPROVED_BY_ITS_APPROVAL)
    for (function, old), text in zip(REPLACED, (call, previous.COMMIT_APPROVAL), strict=True):
        execute_script(f"DROP FUNCTION {function};\n{text}")
        execute_script(_granted(old))
    execute_script(_checks_sql())
