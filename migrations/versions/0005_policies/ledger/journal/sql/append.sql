-- What logins call to append events: in one round trip it checks the login's event rights
-- (each type only into the streams of its right's prefix), reads the stream's head, checks the
-- expected version, sets the time, the txid and the login (`session_user`: who connected,
-- whatever role it set or actor it names), computes the canonical bytes (ledger/canonical.py,
-- tag 3, which cover the login) and chains the hashes. Streams of projections,
-- grants and tokens (approval:, call:, reviewer:, grant:, token:) are the owner's alone here:
-- the commit functions write them with their rows, so a row never falls behind its stream.
-- A lost race is SG409: the first insert waits for a racing append and, once that committed,
-- finds its version. An append in a savepoint is refused (SG425): the row's xmin would not be
-- its txid, which `ledger verify` cannot tell from a forged one. It writes the events itself
-- rather than call signoff_write_events, so the pinned search_path is switched once a call.
CREATE OR REPLACE FUNCTION public.signoff_append(p_stream text, p_expected integer, p_types text[], p_data json[], p_actors text[], p_notify text)
 RETURNS bigint[]
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
DECLARE
    n integer := cardinality(p_types);
    -- current_user: the owner, whose appends are not checked.
    is_owner boolean := pg_has_role(session_user, current_user, 'MEMBER');
    refused text;
    head_version integer;
    head_hash bytea;
    at timestamptz := clock_timestamp();
    -- The canonical bytes of ledger/canonical.py, tag 3: the tag, then seven fields, each a
    -- 4-byte big-endian length and its UTF-8 bytes, the login (who connected, never a name
    -- the caller gives) last. Plain expressions: no query per field.
    session_login text := session_user;
    login_b bytea := convert_to(session_login, 'UTF8');
    login_field bytea := int4send(octet_length(login_b)) || login_b;
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
    inserted_xmin xid;
BEGIN
    -- Streams that are a projection's (or a grant's, or a token's) are written only with their
    -- rows, so a row never falls behind its stream.
    IF p_stream ~ '^(approval|call|reviewer|grant|token|policy):' AND NOT is_owner THEN
        RAISE EXCEPTION '% events are written with their rows, not appended alone', p_stream
            USING ERRCODE = 'SG401',
                  DETAIL = json_build_object('login', session_user::text, 'type',
                                             p_types[1])::text;
    END IF;
    -- Data is a JSON object: whatever reads an event (verify included) looks fields up in it.
    IF n IS NULL OR n = 0 OR n <> cardinality(p_data) OR n <> cardinality(p_actors)
            OR p_stream IS NULL OR p_expected IS NULL OR p_expected < 0
            OR EXISTS (SELECT FROM unnest(p_data) AS d WHERE json_typeof(d) IS DISTINCT FROM 'object') THEN
        RAISE EXCEPTION 'an append needs a stream, a version and as many types, data and '
                'actors, each event''s data a JSON object'
            USING ERRCODE = '22023';
    END IF;
    IF NOT is_owner THEN
        -- A right is an exact type, or a prefix before a final `%`, into streams of its prefix:
        -- compared as written (no LIKE, whose `_` would match any character).
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
            RAISE EXCEPTION '% may not append % events to %', session_user,
                    coalesce(refused, 'null'), p_stream
                USING ERRCODE = 'SG401',
                      DETAIL = json_build_object('login', session_user::text, 'type', refused,
                                                 'stream_id', p_stream)::text;
        END IF;
    END IF;
    at_b := convert_to(to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), 'UTF8');
    prefix := convert_to('signoff.event.v3', 'UTF8') || int4send(octet_length(stream_b))
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
                || int4send(octet_length(data_b)) || data_b
                || login_field;
            head_hash := sha256(head_hash || canonical);
            pos := NULL;
            -- Only the first insert can meet a racing append: once it is in, a racer waits on it.
            INSERT INTO events (txid, stream_id, version, type, data, actor, recorded_at, hash,
                                tag_version, login)
                VALUES (pg_current_xact_id(), p_stream, p_expected + i, p_types[i], p_data[i],
                        p_actors[i], at, head_hash, 3, session_login)
                ON CONFLICT (stream_id, version) DO NOTHING
                RETURNING position, xmin INTO pos, inserted_xmin;
            IF pos IS NULL THEN
                SELECT max(version) INTO head_version FROM events WHERE stream_id = p_stream;
            ELSE
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
