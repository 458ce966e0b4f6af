-- Retires a decrypt-only key (an active one is rotated first); returns whether it did. The row
-- stays: a retired signing key's public half still checks what it signed.
CREATE OR REPLACE FUNCTION public.signoff_key_retire(p_key_id text)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
BEGIN
    UPDATE data_keys SET state = 'retired', retired_at = now()
        WHERE key_id = p_key_id AND state = 'decrypt_only';
    RETURN FOUND;
END
$function$;
