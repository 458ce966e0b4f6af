-- Ends a paused run this worker holds and keeps the run's next pause, in one statement: the run
-- went on from it and paused again. Nothing is written when the worker no longer holds it.
CREATE OR REPLACE FUNCTION public.signoff_pause_again(p_pause_id text, p_worker_id text, p_next_id text, p_approval_ids text[], p_state_sealed bytea)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
DECLARE
    previous paused_runs;
BEGIN
    UPDATE paused_runs SET status = 'resumed', resumed_at = now(), lease_until = NULL
        WHERE pause_id = p_pause_id AND status = 'resuming' AND worker_id = p_worker_id
        RETURNING * INTO previous;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO paused_runs (pause_id, run_id, framework, approval_ids, state_sealed, status,
            paused_by, paused_at)
        VALUES (p_next_id, previous.run_id, previous.framework, coalesce(p_approval_ids, '{}'),
            p_state_sealed, 'paused', session_user, now());
    RETURN true;
END
$function$;
