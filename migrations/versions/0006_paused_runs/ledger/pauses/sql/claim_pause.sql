-- Hands a paused run to one worker for `p_lease_seconds` (1 to 300, by the server's clock): a
-- pause still paused, or one whose resuming worker's lease lapsed. Returns the row, or nothing
-- when another worker holds it or it was resumed already.
CREATE OR REPLACE FUNCTION public.signoff_claim_pause(p_pause_id text, p_worker_id text, p_lease_seconds double precision)
 RETURNS SETOF paused_runs
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
    UPDATE paused_runs SET status = 'resuming', worker_id = p_worker_id,
            lease_until = now() + make_interval(secs => least(greatest(p_lease_seconds, 1), 300))
        WHERE pause_id = p_pause_id
          AND (status = 'paused' OR status = 'resuming' AND lease_until < now())
        RETURNING *;
$function$;
