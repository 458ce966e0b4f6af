-- How the service's login checks an API token, never reading the table: the secret's hash,
-- revocation and expiry, then it stamps `last_used_at` and returns one row (ROWS 1) saying who
-- the token is for. `status` says why a token is refused; callers show one message outward,
-- and revoked or expired is told only to whoever holds the secret.
CREATE OR REPLACE FUNCTION public.signoff_token_use(p_token_id text, p_secret_hash bytea)
 RETURNS TABLE(status text, reviewer text, scope text, expires_at timestamp with time zone)
 LANGUAGE plpgsql
 SECURITY DEFINER ROWS 1
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
DECLARE
    t api_tokens;
    at timestamptz := clock_timestamp();
BEGIN
    SELECT * INTO t FROM api_tokens a WHERE a.token_id = p_token_id;
    IF NOT FOUND OR p_secret_hash IS NULL OR t.secret_hash <> p_secret_hash THEN
        RETURN QUERY SELECT 'invalid'::text, NULL::text, NULL::text, NULL::timestamptz;
    ELSIF t.revoked_at IS NOT NULL THEN
        RETURN QUERY SELECT 'revoked'::text, t.reviewer, t.scope, t.expires_at;
    ELSIF t.expires_at <= at THEN
        RETURN QUERY SELECT 'expired'::text, t.reviewer, t.scope, t.expires_at;
    ELSE
        UPDATE api_tokens a SET last_used_at = at WHERE a.token_id = p_token_id;
        RETURN QUERY SELECT 'valid'::text, t.reviewer, t.scope, t.expires_at;
    END IF;
END
$function$;
