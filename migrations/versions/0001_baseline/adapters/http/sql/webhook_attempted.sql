-- Records one attempt's result, by the lease's holder alone (the claim's `leased_until` fences
-- it): delivered, or due again in p_retry_seconds, or (NULL) given up. Returns whether it did.
CREATE OR REPLACE FUNCTION public.signoff_webhook_attempted(p_id bigint, p_lease timestamp with time zone, p_status integer, p_error text, p_delivered boolean, p_retry_seconds double precision)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
DECLARE
    at timestamptz := clock_timestamp();
BEGIN
    UPDATE webhook_deliveries d SET
        attempts = d.attempts + 1,
        last_status = p_status,
        last_error = left(p_error, 500),
        leased_until = NULL,
        delivered_at = CASE WHEN p_delivered THEN at END,
        next_attempt_at = CASE
            WHEN p_delivered OR p_retry_seconds IS NULL THEN NULL
            ELSE at + make_interval(secs => greatest(p_retry_seconds, 0)) END
        WHERE d.delivery_id = p_id AND d.leased_until = p_lease AND d.delivered_at IS NULL;
    RETURN FOUND;
END
$function$;
