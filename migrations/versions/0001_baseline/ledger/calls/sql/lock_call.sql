-- Locks a call's row FOR UPDATE in the caller's transaction: FOR UPDATE needs UPDATE rights,
-- which no role but the owner has. PL/pgSQL, planned once per connection (a SQL function that
-- cannot be inlined, as SECURITY DEFINER ones cannot, is planned on every call). ROWS 1: it
-- selects by primary key, and at the default estimate of 1,000 rows the statements that read
-- the call's stream for each row returned are priced, on a large journal, past jit_above_cost
-- and JIT-compiled on every execution.
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
