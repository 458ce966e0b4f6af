-- Ends a pause its worker resumed (it ran on, or paused again under a new pause id); true when
-- this worker held it.
CREATE OR REPLACE FUNCTION public.signoff_finish_pause(p_pause_id text, p_worker_id text)
 RETURNS boolean
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
    WITH done AS (
        UPDATE paused_runs SET status = 'resumed', resumed_at = now(), lease_until = NULL
            WHERE pause_id = p_pause_id AND status = 'resuming' AND worker_id = p_worker_id
            RETURNING 1)
    SELECT EXISTS (SELECT FROM done);
$function$;
