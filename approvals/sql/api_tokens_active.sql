-- How many tokens could authenticate now: the service refuses to start with none. A count, no
-- ids.
CREATE OR REPLACE FUNCTION public.signoff_api_tokens_active()
 RETURNS bigint
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
    SELECT count(*) FROM api_tokens WHERE revoked_at IS NULL AND expires_at > now()
$function$;
