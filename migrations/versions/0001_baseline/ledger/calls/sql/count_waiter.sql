CREATE OR REPLACE FUNCTION public.signoff_count_waiter(p_run text, p_call text, p_delta integer)
 RETURNS void
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
    UPDATE tool_calls SET waiters = waiters + sign(p_delta)::integer
    WHERE run_id = p_run AND call_id = p_call AND waiters + sign(p_delta)::integer >= 0
$function$;
