-- Counts a process in (p_delta > 0) or out of those waiting for a call's outcome; the count
-- never goes below 0. A step NOTIFYs only when somebody waits, as a NOTIFY serializes commits
-- server-wide. Not history: no event.
CREATE OR REPLACE FUNCTION public.signoff_count_waiter(p_run text, p_call text, p_delta integer)
 RETURNS void
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
    UPDATE tool_calls SET waiters = waiters + sign(p_delta)::integer
    WHERE run_id = p_run AND call_id = p_call AND waiters + sign(p_delta)::integer >= 0
$function$;
