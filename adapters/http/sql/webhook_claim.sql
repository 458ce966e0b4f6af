-- Claims up to p_limit due deliveries of one target, each leased for p_lease_seconds. SKIP
-- LOCKED, so replicas claiming at once take different rows; a leased row is claimed again only
-- once its lease has lapsed (its holder died mid-attempt).
CREATE OR REPLACE FUNCTION public.signoff_webhook_claim(p_target text, p_limit integer, p_lease_seconds double precision)
 RETURNS SETOF webhook_deliveries
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
DECLARE
    at timestamptz := clock_timestamp();
BEGIN
    IF p_limit IS NULL OR p_limit < 1 OR p_lease_seconds IS NULL OR p_lease_seconds <= 0 THEN
        RAISE EXCEPTION 'a claim needs a limit and a lease of more than 0'
            USING ERRCODE = '22023';
    END IF;
    RETURN QUERY UPDATE webhook_deliveries d
        SET leased_until = at + make_interval(secs => p_lease_seconds)
        WHERE d.delivery_id IN (
            SELECT w.delivery_id FROM webhook_deliveries w
            WHERE w.target = p_target AND w.next_attempt_at <= at
              AND (w.leased_until IS NULL OR w.leased_until <= at)
            ORDER BY w.next_attempt_at, w.delivery_id
            LIMIT p_limit
            FOR UPDATE SKIP LOCKED)
        RETURNING d.*;
END
$function$;
