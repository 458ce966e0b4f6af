-- Records a sticky grant (requests for the tool in the run whose policy lets the granter
-- approve them are approved until it expires): its row and its `approval.granted` event, the
-- first of stream `grant:<id>`, in one call. For the reviewer side alone.
CREATE OR REPLACE FUNCTION public.signoff_grant(p_grant_id text, p_run text, p_tool text, p_granted_by text, p_granted_at timestamp with time zone, p_expires_at timestamp with time zone, p_data json)
 RETURNS bigint[]
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
BEGIN
    INSERT INTO approval_grants (grant_id, run_id, tool, granted_by, granted_at, expires_at)
        VALUES (p_grant_id, p_run, p_tool, p_granted_by, p_granted_at, p_expires_at);
    RETURN signoff_write_events('grant:' || p_grant_id, 0, ARRAY['approval.granted'],
                                ARRAY[p_data], ARRAY[p_granted_by], NULL);
END
$function$;
