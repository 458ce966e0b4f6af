-- How the deliveries of some targets stand, for the service's metrics: per target, the
-- deliveries still to be attempted and the age of the oldest of them, those given up (no
-- attempt left, never delivered) and every failed attempt (an attempt that did not deliver;
-- it only grows). Counts only: the service's login (signoff_reviewer) never reads the rows,
-- and names the targets it delivers to itself. The pending ones are read through
-- webhook_deliveries_due_idx, the failures through webhook_deliveries_failed_idx: neither
-- reads the deliveries that went through at the first attempt, nearly all of them.
CREATE OR REPLACE FUNCTION public.signoff_delivery_state(p_targets text[])
 RETURNS TABLE(target text, pending bigint, oldest_pending_seconds double precision, given_up bigint, failed_attempts bigint)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
    SELECT t.target, p.pending, coalesce(p.oldest, 0), f.given_up, f.failed_attempts
    FROM (SELECT DISTINCT u.target FROM unnest(p_targets) AS u(target)) AS t
    CROSS JOIN LATERAL (
        SELECT count(*) AS pending,
               extract(epoch FROM clock_timestamp() - min(d.created_at))::double precision
                   AS oldest
        FROM webhook_deliveries d
        WHERE d.target = t.target AND d.next_attempt_at IS NOT NULL) AS p
    CROSS JOIN LATERAL (
        SELECT count(*) FILTER (WHERE d.delivered_at IS NULL AND d.next_attempt_at IS NULL)
                   AS given_up,
               coalesce(sum(d.attempts - (d.delivered_at IS NOT NULL)::integer), 0)::bigint
                   AS failed_attempts
        FROM webhook_deliveries d
        WHERE d.target = t.target
          AND (d.attempts > 1 OR (d.attempts > 0 AND d.delivered_at IS NULL))) AS f
$function$;
