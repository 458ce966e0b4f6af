-- The one write on data_keys that every role which seals has: adds p_count (1 to 2^20) to a
-- sealing key's `sealed` counter and returns the new total, NULL when the key does not seal
-- (only checkpoint and result keys do) or is retired. It never lowers the counter nor touches
-- another column. Processes reserve a block before they seal, so a seal costs no round trip;
-- the ring refuses to seal past the key's budget (`ledger.keys.budget`).
CREATE OR REPLACE FUNCTION public.signoff_reserve_nonces(p_key_id text, p_count integer)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
DECLARE
    total bigint;
BEGIN
    IF p_count IS NULL OR p_count < 1 OR p_count > 1048576 THEN
        RAISE EXCEPTION 'a nonce reservation is 1 to 1048576 messages, not %', p_count
            USING ERRCODE = '22023';
    END IF;
    UPDATE data_keys SET sealed = sealed + p_count
        WHERE key_id = p_key_id AND state <> 'retired' AND purpose IN ('checkpoint', 'result')
        RETURNING sealed INTO total;
    RETURN total;
END
$function$;
