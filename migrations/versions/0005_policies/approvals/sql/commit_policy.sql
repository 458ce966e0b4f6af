-- Writes a policy set's row with its `policy.published` event; returns NULL when it wrote
-- nothing (another set took this version first). Publishes take turns (the table's lock), so
-- versions have no gaps. The set names its publisher, who must be an active reviewer of the
-- directory group `policy-admins`, as the event's actor; signoff_write_events checks the login
-- may append the event (the reviewer side, with its signature), and every worker and
-- `ledger verify` check that signature.
CREATE OR REPLACE FUNCTION public.signoff_commit_policy(p_insert boolean, p_row jsonb, p_stream text, p_expected integer, p_types text[], p_data json[], p_actors text[], p_notify text)
 RETURNS bigint[]
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
DECLARE
    r policy_sets := jsonb_populate_record(NULL::policy_sets, p_row);
BEGIN
    IF NOT p_insert OR p_expected <> 0 OR cardinality(p_types) <> 1
            OR p_types[1] IS DISTINCT FROM 'policy.published'
            OR p_stream IS DISTINCT FROM 'policy:' || r.version
            OR p_actors[1] IS DISTINCT FROM r.published_by
            OR (p_data[1]->>'version')::integer IS DISTINCT FROM r.version
            OR p_data[1]->>'set_hash' IS DISTINCT FROM r.set_hash
            OR p_data[1]->>'mode' IS DISTINCT FROM r.mode
            OR p_data[1]->>'policies' IS DISTINCT FROM r.policies
            OR p_data[1]->>'published_by' IS DISTINCT FROM r.published_by THEN
        RAISE EXCEPTION 'a policy set is one policy.published event of stream policy:<version>, '
                'by its publisher, and its row is what the event says'
            USING ERRCODE = 'SG422', DETAIL = json_build_object('stream_id', p_stream)::text;
    END IF;
    IF NOT EXISTS (SELECT FROM reviewers v WHERE v.reviewer_id = r.published_by AND v.active
                   AND 'policy-admins' = ANY (v.groups)) THEN
        RAISE EXCEPTION '% is not a policy administrator (group policy-admins)', r.published_by
            USING ERRCODE = 'SG401',
                  DETAIL = json_build_object('login', session_user::text,
                                             'type', 'policy.published')::text;
    END IF;
    LOCK TABLE policy_sets IN SHARE ROW EXCLUSIVE MODE;
    IF r.version <> (SELECT coalesce(max(s.version), 0) + 1 FROM policy_sets s) THEN
        RETURN NULL;
    END IF;
    INSERT INTO policy_sets VALUES (r.*);
    RETURN signoff_write_events(p_stream, p_expected, p_types, p_data, p_actors, p_notify);
END
$function$;
