-- Gives a paused run this worker holds back, unresumed (it applied nothing: its approvals are
-- not all decided, or the state was refused), so the next resume need not wait for the lease.
CREATE OR REPLACE FUNCTION public.signoff_release_pause(p_pause_id text, p_worker_id text)
 RETURNS boolean
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
    WITH released AS (
        UPDATE paused_runs SET status = 'paused', worker_id = NULL, lease_until = NULL
            WHERE pause_id = p_pause_id AND status = 'resuming' AND worker_id = p_worker_id
            RETURNING 1)
    SELECT EXISTS (SELECT FROM released);
$function$;
