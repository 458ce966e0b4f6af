-- The newest journal position recorded for a target: where the service goes on from when it
-- starts.
CREATE OR REPLACE FUNCTION public.signoff_webhook_latest(p_target text)
 RETURNS bigint
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
    SELECT max(position) FROM webhook_deliveries WHERE target = p_target
$function$;
