-- Locks the row of a once-per-run tool in a run FOR UPDATE, in the caller's transaction; the
-- unique index on (run_id, tool) WHERE once_per_run makes it one row at most. PL/pgSQL and
-- ROWS 1 for the reasons of lock_call.sql.
CREATE OR REPLACE FUNCTION public.signoff_lock_once_per_run(p_run text, p_tool text)
 RETURNS SETOF tool_calls
 LANGUAGE plpgsql
 SECURITY DEFINER ROWS 1
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
BEGIN
    RETURN QUERY SELECT * FROM tool_calls
        WHERE run_id = p_run AND tool = p_tool AND once_per_run FOR UPDATE;
END
$function$;
