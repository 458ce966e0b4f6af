-- Writes an approval's row and appends its events in one call, with signoff_append's checks
-- (event rights, version fence, canonical bytes and hash chain, top level). The row must be
-- what its events make it: reviews change only with a decision, which appends exactly one and
-- changes none; who decided or closed it only with the events that say so; decisions and
-- closing only while pending; a consumption only once. A new approval starts its own stream
-- with approval.requested. Returns NULL when it wrote nothing (the request exists, or the row
-- is not at the expected version).
-- Beyond the login's event rights, every login but the owner's (signoff_app's above all) is held
-- to what it can vouch for (SG401): a decision it records without a reviewer's signature is a
-- sticky grant's, recorded with the new request, and carries exactly that grant's signed event,
-- in force now for this run and tool; an expiry comes once the request is due by the server's
-- clock and names no one; a cancellation without a reviewer's signature is the requester's own;
-- a consumption uses a final approval. Signatures themselves are `ledger verify`'s to check.
CREATE OR REPLACE FUNCTION public.signoff_commit_approval(p_insert boolean, p_approval_id text, p_run_id text, p_thread_id text, p_tool text, p_kind text, p_call_id text, p_args_digest text, p_binding text, p_requested_by text, p_policy jsonb, p_status text, p_reviews jsonb, p_decided_by text[], p_decided_at timestamp with time zone, p_expires_at timestamp with time zone, p_consumed_by text, p_consumed_at timestamp with time zone, p_thread_config jsonb, p_requested_at timestamp with time zone, p_stream text, p_expected integer, p_types text[], p_data json[], p_actors text[], p_notify text)
 RETURNS bigint[]
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
DECLARE
    n integer := cardinality(p_types);
    refused text;
    head_hash bytea;
    head_version integer;
    at timestamptz := clock_timestamp();
    -- The canonical bytes of ledger/canonical.py, tag 3: the tag, then seven fields, each a
    -- 4-byte big-endian length and its UTF-8 bytes, the login last.
    session_login text := session_user;
    login_field bytea := int4send(octet_length(convert_to(session_login, 'UTF8')))
        || convert_to(session_login, 'UTF8');
    prefix bytea;
    at_b bytea;
    version_b bytea;
    type_b bytea;
    actor_b bytea;
    data_b bytea;
    positions bigint[] := '{}';
    pos bigint;
    inserted_xmin xid;
    old approvals;
    decisions integer := cardinality(array_positions(p_types, 'approval.decided'));
    decided boolean := decisions > 0;
    earlier jsonb;
    closed boolean := 'approval.expired' = ANY(p_types) OR 'approval.cancelled' = ANY(p_types);
    allowed text[];
    -- current_user: the owner, whose appends are not checked.
    is_owner boolean := pg_has_role(session_user, current_user, 'MEMBER');
    unvouched text;
    at_run text;
    at_tool text;
    final_by text[];
    final_status text;
BEGIN
    -- Data is a JSON object: whatever reads an event (verify included) looks fields up in it.
    IF n IS NULL OR n = 0 OR n <> cardinality(p_data) OR n <> cardinality(p_actors)
            OR p_stream IS NULL OR p_expected IS NULL OR p_expected < 0
            OR EXISTS (SELECT FROM unnest(p_data) AS d WHERE json_typeof(d) IS DISTINCT FROM 'object') THEN
        RAISE EXCEPTION 'an append needs a stream, a version and as many types, data and '
                'actors, each event''s data a JSON object'
            USING ERRCODE = '22023';
    END IF;
    IF NOT is_owner THEN
        SELECT x.t INTO refused FROM unnest(p_types, p_data) AS x(t, d)
        WHERE x.t IS NULL OR NOT EXISTS (
            SELECT FROM event_rights r
            WHERE (x.t = r.type_pattern OR (right(r.type_pattern, 1) = '%'
                                            AND starts_with(x.t, left(r.type_pattern, -1))))
              AND starts_with(p_stream, r.stream_prefix)
              AND pg_has_role(session_user, r.role, 'MEMBER')
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
    IF p_stream IS DISTINCT FROM 'approval:' || p_approval_id THEN
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
    -- Self-confirmation (approvals/confirm.py), whoever appends it: only on an approval whose
    -- stored policy is the self-confirm tier (no approver named, no reviewer admitted), named
    -- as the session's own login and nobody else, with no reviewer's signature or grant.
    -- Only a call that decides is looked at: a statement fewer on every other step.
    IF decided AND EXISTS (
        SELECT FROM unnest(p_types, p_data, p_actors) AS x(t, d, a)
        WHERE x.t = 'approval.decided' AND x.d::jsonb ? 'self_confirmed'
          AND (p_insert
               OR old.policy ->> 'tier' IS DISTINCT FROM 'self_confirm'
               OR old.policy -> 'approvers' IS DISTINCT FROM '[]'::jsonb
               OR old.policy -> 'any_reviewer' IS DISTINCT FROM 'false'::jsonb
               OR x.d::jsonb -> 'self_confirmed' ->> 'login' IS DISTINCT FROM session_user
               OR x.d::jsonb ->> 'reviewer' IS DISTINCT FROM 'self-confirmed by ' || session_user
               OR x.a IS DISTINCT FROM 'self-confirmed by ' || session_user
               OR x.d::jsonb -> 'decided_by'
                  IS DISTINCT FROM jsonb_build_array('self-confirmed by ' || session_user)
               OR p_decided_by IS DISTINCT FROM ARRAY['self-confirmed by ' || session_user]
               OR x.d::jsonb ?| ARRAY['signature', 'grant', 'grant_id']))
    THEN
        RAISE EXCEPTION '% may self-confirm only a self-confirm approval, as itself', session_user
            USING ERRCODE = 'SG401',
                  DETAIL = json_build_object('login', session_user::text,
                                             'type', 'approval.decided')::text;
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
    IF NOT is_owner THEN
        IF p_insert THEN
            at_run := p_run_id;
            at_tool := p_tool;
            old.requested_by := p_requested_by;
            old.expires_at := p_expires_at;
        ELSE
            at_run := old.run_id;
            at_tool := old.tool;
        END IF;
        -- Only decisions, closings and consumptions are vouched for: a request alone skips it.
        IF decided OR closed OR 'approval.consumed' = ANY(p_types) THEN
        SELECT x.t INTO unvouched
        FROM unnest(p_types, p_data, p_actors) WITH ORDINALITY AS x(t, d, a, i)
        WHERE CASE x.t
            WHEN 'approval.decided' THEN
                x.a IS DISTINCT FROM x.d->>'reviewer'
                OR CASE
                    WHEN jsonb_typeof(x.d::jsonb -> 'grant') = 'object' THEN
                        -- A sticky grant's approval: the grant's own signed event, carried
                        -- whole, its row in force now, for this run and tool, approving alone.
                        NOT p_insert OR x.d->>'decision' IS DISTINCT FROM 'approve'
                        OR x.d->>'final' IS DISTINCT FROM 'true'
                        OR x.d::jsonb -> 'decided_by' IS DISTINCT FROM jsonb_build_array(x.a)
                        OR NOT EXISTS (
                            SELECT FROM approval_grants g
                            JOIN events e ON e.stream_id = 'grant:' || g.grant_id
                                AND e.version = 1 AND e.type = 'approval.granted'
                            WHERE g.grant_id = x.d->>'grant_id'
                              AND g.run_id = at_run AND g.tool = at_tool
                              AND g.granted_by = x.a
                              AND g.granted_at <= at AND at < g.expires_at
                              AND e.data::jsonb = x.d::jsonb -> 'grant')
                    WHEN x.d::jsonb ? 'self_confirmed' THEN
                        -- A self-confirmation: checked above, for every login.
                        false
                    ELSE
                        -- The reviewer side's decision, signed (event rights need it): no
                        -- other login's, whatever its data holds.
                        jsonb_typeof(x.d::jsonb -> 'signature') IS DISTINCT FROM 'object'
                        OR NOT pg_has_role(session_user, 'signoff_reviewer', 'MEMBER')
                END
            WHEN 'approval.expired' THEN
                x.a IS DISTINCT FROM 'signoff'
                OR old.expires_at IS NULL OR at < old.expires_at
            WHEN 'approval.cancelled' THEN
                -- Signed, it is a reviewer's (event rights need the signature). Unsigned, it
                -- is the requester withdrawing its own request: in the requester's name and
                -- from the login that asked (a name is the caller's word, a login is not).
                (jsonb_typeof(x.d::jsonb -> 'signature') IS DISTINCT FROM 'object'
                 OR NOT pg_has_role(session_user, 'signoff_reviewer', 'MEMBER'))
                AND (x.a IS DISTINCT FROM old.requested_by
                     OR NOT p_insert AND NOT EXISTS (
                         SELECT FROM events e
                         WHERE e.stream_id = p_stream AND e.version = 1
                           AND e.login = session_user))
            WHEN 'approval.consumed' THEN
                -- Once final, and after whatever decides it in the same call.
                p_status = 'pending'
                OR EXISTS (SELECT FROM unnest(p_types) WITH ORDINALITY AS y(t, j)
                           WHERE y.t = 'approval.decided' AND y.j > x.i)
            ELSE false
        END
        LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION '% may not append this % event to approval %', session_user,
                    unvouched, p_approval_id
                USING ERRCODE = 'SG401',
                      DETAIL = json_build_object('login', session_user::text,
                                                 'type', unvouched)::text;
        END IF;
        END IF;
        -- The row names who decided, and what, as the last event that ends the request says
        -- (none of them: as it did).
        final_by := old.decided_by;
        final_status := coalesce(old.status::text, 'pending');
        IF decided OR closed THEN
        SELECT CASE x.t WHEN 'approval.decided'
                   THEN ARRAY(SELECT json_array_elements_text(x.d -> 'decided_by'))
                   ELSE ARRAY[x.a] END,
               CASE x.t WHEN 'approval.expired' THEN 'expired'
                   WHEN 'approval.cancelled' THEN 'cancelled'
                   ELSE CASE x.d->>'decision' WHEN 'approve' THEN 'approved'
                       WHEN 'reject' THEN 'rejected' WHEN 'edit' THEN 'edited'
                       WHEN 'respond' THEN 'responded' END END
            INTO final_by, final_status
            FROM unnest(p_types, p_data, p_actors) WITH ORDINALITY AS x(t, d, a, i)
            WHERE x.t IN ('approval.expired', 'approval.cancelled')
               OR (x.t = 'approval.decided' AND x.d->>'final' = 'true'
                   AND json_typeof(x.d -> 'decided_by') = 'array')
            ORDER BY x.i DESC LIMIT 1;
        IF NOT FOUND THEN
            final_by := old.decided_by;
            final_status := coalesce(old.status::text, 'pending');
        END IF;
        END IF;
        IF p_decided_by IS DISTINCT FROM final_by OR p_status IS DISTINCT FROM final_status THEN
            RAISE EXCEPTION 'approval % is not what its events % make it', p_approval_id, p_types
                USING ERRCODE = 'SG422', DETAIL = json_build_object('stream_id', p_stream)::text;
        END IF;
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
    END IF;
    IF p_insert THEN
        head_version := 0;
        head_hash := '\x0000000000000000000000000000000000000000000000000000000000000000';
    ELSE
        SELECT version, hash INTO head_version, head_hash
            FROM events WHERE stream_id = p_stream AND version = p_expected;
    END IF;
    at_b := convert_to(to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), 'UTF8');
    prefix := convert_to('signoff.event.v3', 'UTF8')
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
                || int4send(octet_length(data_b)) || data_b || login_field);
            pos := NULL;
            INSERT INTO events (txid, stream_id, version, type, data, actor, recorded_at, hash,
                                tag_version, login)
                VALUES (pg_current_xact_id(), p_stream, p_expected + i, p_types[i], p_data[i],
                        p_actors[i], at, head_hash, 3, session_login)
                ON CONFLICT (stream_id, version) DO NOTHING
                RETURNING position, xmin INTO pos, inserted_xmin;
            IF pos IS NOT NULL THEN
                -- In a savepoint the row's xmin is the savepoint's, which `ledger verify`
                -- cannot tell from a forged txid.
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
        SELECT coalesce(max(version), 0) INTO head_version FROM events WHERE stream_id = p_stream;
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
$function$;
