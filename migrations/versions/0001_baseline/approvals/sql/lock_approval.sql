-- Locks an approval's row FOR UPDATE in the caller's transaction (a consumer inside its
-- caller's transaction): FOR UPDATE needs UPDATE rights, which no role but the owner has.
-- PL/pgSQL and ROWS 1 for the reasons of ledger/calls/sql/lock_call.sql.
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
