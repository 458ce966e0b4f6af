-- Makes a purpose's active key, for the key administrator (the ring appends its `key.created`
-- event in the same transaction). A signing purpose carries its 32-byte Ed25519 public half,
-- no other does. A decision key signs reviewers' decisions and is wrapped by the reviewer
-- side's KEK, which workers never hold, so only a login of the reviewer side (a member of
-- signoff_reviewer) makes one.
CREATE OR REPLACE FUNCTION public.signoff_key_create(p_key_id text, p_purpose text, p_kek_id text, p_wrapped bytea, p_public_key bytea)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
BEGIN
    IF p_purpose = 'decision_signing'
            AND NOT pg_has_role(session_user, 'signoff_reviewer', 'MEMBER') THEN
        RAISE EXCEPTION 'key %: decision keys are the reviewer side''s to make', p_key_id
            USING ERRCODE = '42501';
    END IF;
    IF (CASE WHEN p_purpose IN ('digest_signing', 'decision_signing')
            THEN p_public_key IS NULL OR length(p_public_key) <> 32
            ELSE p_public_key IS NOT NULL END) THEN
        RAISE EXCEPTION 'key %: a % key has a 32-byte public key exactly when it signs',
            p_key_id, p_purpose USING ERRCODE = '22023';
    END IF;
    INSERT INTO data_keys (key_id, purpose, state, kek_id, wrapped, public_key)
        VALUES (p_key_id, p_purpose, 'active', p_kek_id, p_wrapped, p_public_key);
END
$function$;
