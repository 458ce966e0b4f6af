-- Writes a tool call's row and appends its events in one call, with signoff_append's checks
-- (event rights, version fence, canonical bytes and hash chain, top level). The row must be
-- what its events make it: the status the last event leaves; a new call starts its own stream
-- with call.started; a later step moves only a running call or resolves an outcome_unknown
-- one, so a finished call never runs again; a call names an approval and its deciders only in
-- the transaction that consumed that approval, and only an approval asked for this very call
-- (its run, tool, call id and the digest of the arguments the model asked with).
-- Leases are fenced: a running call's row keeps the SHA-256 of a random token that only the
-- worker holding the lease knows (`p_lease_token`, given at the call's start and at a takeover).
-- Only that worker moves the call while its lease runs, by the server's clock; once the lease
-- has lapsed another worker may take the call over (`call.retried`, attempts left) or settle it
-- (`call.outcome_unknown` for a write, `call.failed` for a read, attempts spent), nothing else.
-- Refused: SQLSTATE SG432. Leases run 1 to 300 seconds. While a loss of committed history is
-- open (`history_losses`), no call starts, runs again or is taken over: SG410. A resolution
-- leaves a call succeeded or failed, nothing else. Returns NULL when it wrote
-- nothing, else the journal position and hash (hex) of the last event it appended,
-- {"position", "hash"}: what a trace of the call names as its evidence.
-- A call that starts running adds itself to its run's history (`call_tallies`): `p_tally` holds
-- the sums of its numeric arguments and, when a policy judged it by the run's history, how many
-- calls the run had then (`seen`); if others started since, the call is refused (SG438) and
-- judged again. The run's intents take turns on an advisory lock for that check.
-- Every step of every call runs it, so its fields are typed parameters and it evaluates few
-- PL/pgSQL expressions: PL/pgSQL prepares each one again in every transaction.
CREATE OR REPLACE FUNCTION public.signoff_commit_call(p_insert boolean, p_run_id text, p_call_id text, p_tool text, p_effect text, p_once_per_run boolean, p_request_digest text, p_args_digest text, p_idempotency_key text, p_approval_id text, p_status text, p_attempts integer, p_worker_id text, p_result_digest text, p_resolved_by text, p_started_at timestamp with time zone, p_finished_at timestamp with time zone, p_approved_by text[], p_approval_stream text, p_args_sealed bytea, p_result_sealed bytea, p_lease_seconds double precision, p_lease_token bytea, p_tally jsonb, p_stream text, p_expected integer, p_types text[], p_data json[], p_actors text[], p_notify text)
 RETURNS json
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
DECLARE
    n integer := cardinality(p_types);
    at timestamptz := clock_timestamp();
    lease timestamptz := CASE WHEN p_status = 'running'
        THEN now() + make_interval(secs => least(greatest(p_lease_seconds, 1), 300)) END;
    token_hash bytea := CASE WHEN p_status = 'running' THEN sha256(p_lease_token) END;
    refused text;
    head_hash bytea;
    head_version integer;
    positions bigint[];
    pos bigint;
    top_level boolean;
    wake boolean;
    a approvals;
BEGIN
    -- Data is a JSON object: whatever reads an event (verify included) looks fields up in it.
    IF n IS NULL OR n = 0 OR n <> cardinality(p_data) OR n <> cardinality(p_actors)
            OR p_stream IS NULL OR p_expected IS NULL OR p_expected < 0
            OR EXISTS (SELECT FROM unnest(p_data) AS d WHERE json_typeof(d) IS DISTINCT FROM 'object')
            OR p_status = 'running' AND coalesce(octet_length(p_lease_token), 0) < 16 THEN
        RAISE EXCEPTION 'an append needs a stream, a version and as many types, data and '
                'actors, each event''s data a JSON object, and a running call a lease token '
                'of 16 bytes or more'
            USING ERRCODE = '22023';
    END IF;
    -- current_user: the owner, whose appends are not checked.
    IF NOT pg_has_role(session_user, current_user, 'MEMBER') THEN
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
    IF p_status IS DISTINCT FROM (CASE p_types[n]
        WHEN 'call.started' THEN 'running'
        WHEN 'call.retried' THEN 'running'
        WHEN 'call.succeeded' THEN 'succeeded'
        WHEN 'call.failed' THEN 'failed'
        WHEN 'call.outcome_unknown' THEN 'outcome_unknown'
        WHEN 'call.denied' THEN 'denied'
        WHEN 'call.responded' THEN 'responded'
        WHEN 'call.resolved' THEN CASE WHEN p_data[n]->>'status' IN ('succeeded', 'failed')
            THEN p_data[n]->>'status' END
    END) OR p_insert AND (p_expected <> 0 OR p_types[1] IS DISTINCT FROM 'call.started'
                OR p_stream IS DISTINCT FROM 'call:'
                    || replace(replace(p_run_id, '%', '%25'), '/', '%2F') || '/'
                    || replace(replace(p_call_id, '%', '%25'), '/', '%2F')) THEN
        IF p_status IS DISTINCT FROM (CASE p_types[n]
        WHEN 'call.started' THEN 'running'
        WHEN 'call.retried' THEN 'running'
        WHEN 'call.succeeded' THEN 'succeeded'
        WHEN 'call.failed' THEN 'failed'
        WHEN 'call.outcome_unknown' THEN 'outcome_unknown'
        WHEN 'call.denied' THEN 'denied'
        WHEN 'call.responded' THEN 'responded'
        WHEN 'call.resolved' THEN CASE WHEN p_data[n]->>'status' IN ('succeeded', 'failed')
            THEN p_data[n]->>'status' END
    END) THEN
            RAISE EXCEPTION 'a % event leaves call % %, not %', p_types[n], p_stream,
                    coalesce((CASE p_types[n]
        WHEN 'call.started' THEN 'running'
        WHEN 'call.retried' THEN 'running'
        WHEN 'call.succeeded' THEN 'succeeded'
        WHEN 'call.failed' THEN 'failed'
        WHEN 'call.outcome_unknown' THEN 'outcome_unknown'
        WHEN 'call.denied' THEN 'denied'
        WHEN 'call.responded' THEN 'responded'
        WHEN 'call.resolved' THEN CASE WHEN p_data[n]->>'status' IN ('succeeded', 'failed')
            THEN p_data[n]->>'status' END
    END), 'unchanged'), coalesce(p_status, 'null')
                USING ERRCODE = 'SG422',
                      DETAIL = json_build_object('stream_id', p_stream, 'type', p_types[n])::text;
        END IF;
        RAISE EXCEPTION 'a new call starts its own stream with call.started'
            USING ERRCODE = 'SG422',
                  DETAIL = json_build_object('stream_id', p_stream, 'type', p_types[1])::text;
    END IF;
    -- No call starts, nor runs again, while a loss of committed history is open: the lost
    -- history may have run it, or consumed its approval (`history_losses`).
    IF p_status = 'running' AND EXISTS (SELECT FROM history_losses WHERE settled_at IS NULL) THEN
        RAISE EXCEPTION 'committed history was lost and is not settled: call % does not start '
                'nor run again', p_stream
                USING ERRCODE = 'SG410',
                      HINT = 'an operator settles it: signoff db history',
                      DETAIL = json_build_object('stream_id', p_stream)::text;
    END IF;
    -- A later step moves only a running call, or resolves an `outcome_unknown` one: a finished
    -- call never runs again, whatever it is given.
    IF p_insert THEN
        IF p_tally ? 'seen' AND p_status = 'running' THEN
            PERFORM pg_advisory_xact_lock(hashtextextended('signoff.run:' || p_run_id, 0));
            IF (SELECT coalesce(sum(t.calls), 0) FROM call_tallies t
                    WHERE t.run_id = p_run_id AND t.bucket = '-infinity')
                    <> (p_tally->>'seen')::bigint THEN
                RAISE EXCEPTION 'run % has calls that started after call % was judged',
                        p_run_id, p_stream
                    USING ERRCODE = 'SG438',
                          DETAIL = json_build_object('stream_id', p_stream)::text;
            END IF;
        END IF;
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
            -- An approval allows the one call it was asked for: not another tool's, nor other
            -- arguments (the digests name the same value-MAC key: the worker writes the
            -- request digest under the approval's).
            IF a.tool <> p_tool OR a.args_digest <> p_request_digest THEN
                RAISE EXCEPTION 'approval % was asked for another call than % (tool %, not %, '
                        'or other arguments)', a.approval_id, p_stream, a.tool, p_tool
                    USING ERRCODE = 'SG422',
                          DETAIL = json_build_object('stream_id', p_stream,
                                                     'type', p_types[1])::text;
            END IF;
        END IF;
        INSERT INTO tool_calls (run_id, call_id, tool, effect, once_per_run, request_digest,
                args_digest, args_sealed, idempotency_key, approval_id, status, attempts,
                worker_id, lease_until, result_digest, result_sealed, resolved_by, started_at,
                finished_at, waiters, version, approved_by, approval_stream, stream_id,
                lease_token_hash)
            VALUES (p_run_id, p_call_id, p_tool, p_effect, p_once_per_run, p_request_digest,
                p_args_digest, p_args_sealed, p_idempotency_key, p_approval_id, p_status,
                p_attempts, p_worker_id, lease, p_result_digest, p_result_sealed, p_resolved_by,
                p_started_at, p_finished_at, 0, n, p_approved_by, p_approval_stream, p_stream,
                token_hash)
            ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
        IF p_status = 'running' THEN
            INSERT INTO call_tallies AS t (run_id, bucket, tool, calls, sums)
                VALUES (p_run_id, '-infinity', p_tool, 1, coalesce(p_tally->'sums', '{}')),
                       (p_run_id, date_trunc('hour', at, 'UTC'), p_tool, 1,
                        coalesce(p_tally->'sums', '{}'))
                ON CONFLICT (run_id, bucket, tool) DO UPDATE SET calls = t.calls + 1,
                    sums = CASE WHEN EXCLUDED.sums = '{}' THEN t.sums ELSE (
                        SELECT jsonb_object_agg(k, coalesce((t.sums->>k)::numeric, 0)
                                                   + coalesce((EXCLUDED.sums->>k)::numeric, 0))
                        FROM (SELECT jsonb_object_keys(t.sums)
                              UNION SELECT jsonb_object_keys(EXCLUDED.sums)) AS keys(k)) END;
        END IF;
        -- A new stream starts from the genesis hash (head_hash NULL below).
    ELSE
        UPDATE tool_calls t SET status = p_status, attempts = p_attempts,
                worker_id = p_worker_id, lease_until = lease, result_digest = p_result_digest,
                result_sealed = coalesce(p_result_sealed, t.result_sealed),
                resolved_by = p_resolved_by, finished_at = p_finished_at,
                version = p_expected + n, lease_token_hash = token_hash
            WHERE t.run_id = p_run_id AND t.call_id = p_call_id AND t.version = p_expected
              AND t.stream_id = p_stream AND 'call.started' <> ALL(p_types)
              AND t.status = CASE WHEN 'call.resolved' = ANY(p_types)
                                  THEN 'outcome_unknown' ELSE 'running' END
              -- The lease's holder, or after it lapsed a takeover or a settlement (the
              -- attempts of ledger.calls.model.Effect: 1 for single_attempt, else 3).
              AND (t.status <> 'running' OR t.lease_token_hash = sha256(p_lease_token)
                   OR t.lease_until < now() AND n = 1 AND CASE p_types[1]
                       WHEN 'call.retried' THEN t.effect <> 'single_attempt' AND t.attempts < 3
                       WHEN 'call.outcome_unknown' THEN t.effect <> 'read'
                           AND t.attempts >= CASE t.effect WHEN 'single_attempt' THEN 1 ELSE 3 END
                       WHEN 'call.failed' THEN t.effect = 'read' AND t.attempts >= 3
                       ELSE false END)
            RETURNING t.waiters > 0 INTO wake;
        IF NOT FOUND THEN
            -- At the version the caller read, yet refused: another worker's lease.
            PERFORM FROM tool_calls t
                WHERE t.run_id = p_run_id AND t.call_id = p_call_id AND t.version = p_expected
                  AND t.stream_id = p_stream AND t.status = 'running'
                  AND 'call.resolved' <> ALL(p_types) AND 'call.started' <> ALL(p_types);
            IF FOUND THEN
                RAISE EXCEPTION 'call % is leased to another worker: only its holder moves it '
                        'before the lease lapses, and then only to a takeover or a settlement',
                        p_stream
                    USING ERRCODE = 'SG432',
                          DETAIL = json_build_object('stream_id', p_stream,
                                                     'type', p_types[n])::text;
            END IF;
            RETURN NULL;
        END IF;
        -- The head the row was fenced at; none when the stream is not where the row is.
        SELECT hash INTO head_hash FROM events WHERE stream_id = p_stream AND version = p_expected;
    END IF;
    IF FOUND THEN  -- the new row written, or the later step's head read
        FOR i IN 1 .. n LOOP
            INSERT INTO events (txid, stream_id, version, type, data, actor, recorded_at, hash,
                                tag_version, login)
                VALUES (pg_current_xact_id(), p_stream, p_expected + i, p_types[i], p_data[i],
                        p_actors[i], at,
                        sha256(coalesce(head_hash, '\x0000000000000000000000000000000000000000000000000000000000000000'::bytea) || convert_to('signoff.event.v3', 'UTF8')
                || int4send(octet_length(convert_to(p_stream, 'UTF8'))) || convert_to(p_stream, 'UTF8')
                || int4send(octet_length(convert_to((p_expected + i)::text, 'UTF8'))) || convert_to((p_expected + i)::text, 'UTF8')
                || int4send(octet_length(convert_to(p_types[i], 'UTF8'))) || convert_to(p_types[i], 'UTF8')
                || int4send(octet_length(convert_to(p_actors[i], 'UTF8'))) || convert_to(p_actors[i], 'UTF8')
                || int4send(octet_length(convert_to(to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), 'UTF8'))) || convert_to(to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), 'UTF8')
                || int4send(octet_length(convert_to(p_data[i]::text, 'UTF8'))) || convert_to(p_data[i]::text, 'UTF8')
                || int4send(octet_length(convert_to(session_user::text, 'UTF8'))) || convert_to(session_user::text, 'UTF8')),
                        3, session_user)
                ON CONFLICT (stream_id, version) DO NOTHING
                -- In a savepoint the row's xmin is the savepoint's, which `ledger verify`
                -- cannot tell from a forged txid.
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
    RETURN json_build_object('position', pos, 'hash', encode(head_hash, 'hex'));
END
$function$;
