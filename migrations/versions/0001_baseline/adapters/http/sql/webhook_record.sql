-- Makes a delivery, due now, of each of some journal events to a target: only approval.requested
-- and call.outcome_unknown events of the journal can be made one. An event already recorded
-- for that target is left as it is. Returns how many it made.
CREATE OR REPLACE FUNCTION public.signoff_webhook_record(p_positions bigint[], p_target text)
 RETURNS integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
DECLARE
    made integer;
BEGIN
    INSERT INTO webhook_deliveries (position, kind, target, next_attempt_at, created_at)
        SELECT e.position, e.type, p_target, clock_timestamp(), clock_timestamp()
        FROM events e
        WHERE e.position = ANY (p_positions)
          AND e.type IN ('approval.requested', 'call.outcome_unknown')
        ORDER BY e.position
        ON CONFLICT (position, target) DO NOTHING;
    GET DIAGNOSTICS made = ROW_COUNT;
    RETURN made;
END
$function$;
