CREATE OR REPLACE FUNCTION public.signoff_lock_call(p_run text, p_call text)
 RETURNS SETOF tool_calls
 LANGUAGE plpgsql
 SECURITY DEFINER ROWS 1
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
BEGIN
    RETURN QUERY SELECT * FROM tool_calls WHERE run_id = p_run AND call_id = p_call FOR UPDATE;
END
$function$;
