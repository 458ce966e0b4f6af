-- The journal write behind signoff_grant and signoff_commit_reviewer: what signoff_append
-- checks and writes (event rights and their stream prefixes, version fence, the login,
-- canonical bytes and hash chain, top level), without its refusal of projected streams, so no
-- login may call it (EXECUTE is granted to no role). Called from those functions it still
-- checks the login (`session_user`) against `event_rights`, unless the login is the owner, and
-- records it in each event.
CREATE OR REPLACE FUNCTION public.signoff_write_events(p_stream text, p_expected integer, p_types text[], p_data json[], p_actors text[], p_notify text)
 RETURNS bigint[]
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
DECLARE
    n integer := cardinality(p_types);
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
    -- Data is a JSON object: whatever reads an event (verify included) looks fields up in it.
    IF n IS NULL OR n = 0 OR n <> cardinality(p_data) OR n <> cardinality(p_actors)
            OR p_stream IS NULL OR p_expected IS NULL OR p_expected < 0
            OR EXISTS (SELECT FROM unnest(p_data) AS d WHERE json_typeof(d) IS DISTINCT FROM 'object') THEN
        RAISE EXCEPTION 'an append needs a stream, a version and as many types, data and '
                'actors, each event''s data a JSON object'
            USING ERRCODE = '22023';
    END IF;
    IF NOT pg_has_role(session_user, current_user, 'MEMBER') THEN  -- current_user: the owner
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
