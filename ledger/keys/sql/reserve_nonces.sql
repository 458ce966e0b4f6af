-- The one write on data_keys that every role which seals has: adds p_count (1 to 69632, a
-- process's largest block plus its largest credit) to a sealing key's `sealed` counter and
-- returns the new total, NULL when the key does not seal (only checkpoint and result keys do)
-- or is retired. It never lowers the counter nor touches another column. Processes reserve a
-- block before they seal, so a seal costs no round trip; the ring refuses to seal past the
-- key's budget (`ledger.keys.budget`). A login (session_user: the caller, not this function's
-- owner) reserves at most 1048576 messages a minute over all keys (`nonce_rates`); past that
-- it is refused with SQLSTATE 53400 until the next minute, and nothing is counted.
CREATE OR REPLACE FUNCTION public.signoff_reserve_nonces(p_key_id text, p_count integer)
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
DECLARE
    total bigint;
    used bigint;
    this_minute timestamptz := date_trunc('minute', clock_timestamp());
BEGIN
    IF p_count IS NULL OR p_count < 1 OR p_count > 69632 THEN
        RAISE EXCEPTION 'a nonce reservation is 1 to 69632 messages, not %', p_count
            USING ERRCODE = '22023';
    END IF;
    INSERT INTO nonce_rates AS r (login, window_start, reserved)
        VALUES (session_user, this_minute, p_count)
        ON CONFLICT (login) DO UPDATE SET
            window_start = greatest(r.window_start, this_minute),
            reserved = CASE WHEN r.window_start < this_minute THEN p_count
                            ELSE r.reserved + p_count END
        RETURNING reserved INTO used;
    IF used > 1048576 THEN
        RAISE EXCEPTION 'login % reserved % nonces this minute, over its 1048576',
            session_user, used - p_count
            USING ERRCODE = '53400', HINT = 'signoff_nonce_rate';
    END IF;
    UPDATE data_keys SET sealed = sealed + p_count
        WHERE key_id = p_key_id AND state <> 'retired' AND purpose IN ('checkpoint', 'result')
        RETURNING sealed INTO total;
    RETURN total;
END
$function$;
