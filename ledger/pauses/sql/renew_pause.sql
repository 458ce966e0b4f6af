-- Renews this worker's lease on a paused run it is resuming (1 to 300 seconds, by the server's
-- clock); false when it no longer holds it (the lease lapsed and another worker took it over).
CREATE OR REPLACE FUNCTION public.signoff_renew_pause(p_pause_id text, p_worker_id text, p_lease_seconds double precision)
 RETURNS boolean
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
    WITH renewed AS (
        UPDATE paused_runs
            SET lease_until = now() + make_interval(secs => least(greatest(p_lease_seconds, 1), 300))
            WHERE pause_id = p_pause_id AND status = 'resuming' AND worker_id = p_worker_id
              AND lease_until >= now()
            RETURNING 1)
    SELECT EXISTS (SELECT FROM renewed);
$function$;
