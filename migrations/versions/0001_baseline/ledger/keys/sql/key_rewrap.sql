-- Wraps a key again under another KEK; returns whether the key exists. A decision key is
-- wrapped by the reviewer side's KEK, so only a login of the reviewer side rewraps one.
CREATE OR REPLACE FUNCTION public.signoff_key_rewrap(p_key_id text, p_kek_id text, p_wrapped bytea)
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
BEGIN
    IF (SELECT purpose FROM data_keys WHERE key_id = p_key_id) = 'decision_signing'
            AND NOT pg_has_role(session_user, 'signoff_reviewer', 'MEMBER') THEN
        RAISE EXCEPTION 'key %: decision keys are the reviewer side''s to rewrap', p_key_id
            USING ERRCODE = '42501';
    END IF;
    UPDATE data_keys SET kek_id = p_kek_id, wrapped = p_wrapped WHERE key_id = p_key_id;
    RETURN FOUND;
END
$function$;
