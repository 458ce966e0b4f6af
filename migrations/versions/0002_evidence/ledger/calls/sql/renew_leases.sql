-- Renews the leases of the running calls a worker holds, at the versions it holds them, for
-- 1 to 300 seconds from now by the server's clock; returns how many it renewed. Only the
-- lease's holder renews it: each call comes with the token whose SHA-256 its row keeps (see
-- signoff_commit_call). A renewal only lengthens a lease. Leases are not history: no event.
CREATE OR REPLACE FUNCTION public.signoff_renew_leases(p_runs text[], p_calls text[], p_versions integer[], p_tokens bytea[], p_seconds double precision)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
DECLARE
    renewed bigint;
BEGIN
    UPDATE tool_calls t
        SET lease_until = greatest(t.lease_until, now() + make_interval(secs => least(greatest(p_seconds, 1), 300)))
        FROM unnest(p_runs, p_calls, p_versions, p_tokens) AS held(run_id, call_id, version, token)
        WHERE t.run_id = held.run_id AND t.call_id = held.call_id AND t.version = held.version
          AND t.status = 'running' AND t.lease_token_hash = sha256(held.token);
    GET DIAGNOSTICS renewed = ROW_COUNT;
    RETURN renewed;
END
$function$;
