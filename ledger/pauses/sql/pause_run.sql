-- Keeps the sealed paused state of a run (a new pause id); the login that paused it is recorded.
CREATE OR REPLACE FUNCTION public.signoff_pause_run(p_pause_id text, p_run_id text, p_framework text, p_approval_ids text[], p_state_sealed bytea)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
BEGIN
    INSERT INTO paused_runs (pause_id, run_id, framework, approval_ids, state_sealed, status,
            paused_by, paused_at)
        VALUES (p_pause_id, p_run_id, p_framework, coalesce(p_approval_ids, '{}'),
            p_state_sealed, 'paused', session_user, now());
END
$function$;
