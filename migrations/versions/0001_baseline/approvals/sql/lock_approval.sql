CREATE OR REPLACE FUNCTION public.signoff_lock_approval(p_id text)
 RETURNS SETOF approvals
 LANGUAGE plpgsql
 SECURITY DEFINER ROWS 1
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
BEGIN
    RETURN QUERY SELECT * FROM approvals WHERE approval_id = p_id FOR UPDATE;
END
$function$;
