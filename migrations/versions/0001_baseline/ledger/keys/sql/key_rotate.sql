-- Demotes the purpose's active key to decrypt-only and makes its successor, with
-- signoff_key_create's checks; returns the demoted key's id (NULL when there is none).
CREATE OR REPLACE FUNCTION public.signoff_key_rotate(p_key_id text, p_purpose text, p_kek_id text, p_wrapped bytea, p_public_key bytea)
 RETURNS text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
DECLARE
    old text;
BEGIN
    UPDATE data_keys SET state = 'decrypt_only', rotated_at = now()
        WHERE purpose = p_purpose AND state = 'active' RETURNING key_id INTO old;
    PERFORM signoff_key_create(p_key_id, p_purpose, p_kek_id, p_wrapped, p_public_key);
    RETURN old;
END
$function$;
