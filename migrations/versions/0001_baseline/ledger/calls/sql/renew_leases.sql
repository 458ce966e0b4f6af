-- Renews the leases of the running calls a worker holds, at the versions it holds them, for
-- 1 second to a day; returns how many it renewed. A renewal only lengthens a lease, so no
-- worker cuts another's short to take over a call that still runs. Leases are not history:
-- no event.
CREATE OR REPLACE FUNCTION public.signoff_renew_leases(p_runs text[], p_calls text[], p_versions integer[], p_seconds double precision)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
DECLARE
    renewed bigint;
BEGIN
    UPDATE tool_calls t
        SET lease_until = greatest(t.lease_until, now() + make_interval(secs => least(greatest(p_seconds, 1), 86400)))
        FROM unnest(p_runs, p_calls, p_versions) AS held(run_id, call_id, version)
        WHERE t.run_id = held.run_id AND t.call_id = held.call_id AND t.version = held.version
          AND t.status = 'running';
    GET DIAGNOSTICS renewed = ROW_COUNT;
    RETURN renewed;
END
$function$;
