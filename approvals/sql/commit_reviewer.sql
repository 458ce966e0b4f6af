-- Writes a reviewer directory row with its `reviewer.*` events; returns NULL when it wrote
-- nothing. The directory is an administrator's: EXECUTE is the owner's alone.
CREATE OR REPLACE FUNCTION public.signoff_commit_reviewer(p_insert boolean, p_row jsonb, p_stream text, p_expected integer, p_types text[], p_data json[], p_actors text[], p_notify text)
 RETURNS bigint[]
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
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
$function$;
