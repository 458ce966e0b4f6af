-- A process's report that the database lacks events it saw committed: `p_positions` and the
-- chain hashes (hex) it saw there. The report is checked, not trusted: only the positions the
-- database lacks, or holds with another hash, and that no settled loss named with the same
-- hash, are recorded, and nothing is when none is left. Opens a loss (`history_losses`) unless
-- one is open. Returns the open loss's id, NULL when nothing new was lost.
CREATE OR REPLACE FUNCTION public.signoff_report_history_lost(p_positions bigint[], p_hashes text[])
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
DECLARE
    lost_positions bigint[];
    lost_hashes text[];
    open_id bigint;
BEGIN
    IF cardinality(p_positions) IS DISTINCT FROM cardinality(p_hashes)
            OR EXISTS (SELECT FROM unnest(p_positions, p_hashes) AS s(p, h)
                       WHERE s.p IS NULL OR s.h IS NULL OR s.h !~ '^[0-9a-f]{64}$') THEN
        RAISE EXCEPTION 'a loss names positions and the hex of the 32-byte hash seen at each'
            USING ERRCODE = '22023';
    END IF;
    SELECT array_agg(s.p ORDER BY s.p), array_agg(s.h ORDER BY s.p)
    INTO lost_positions, lost_hashes
    FROM unnest(p_positions, p_hashes) AS s(p, h)
    WHERE NOT EXISTS (SELECT FROM events e WHERE e.position = s.p AND e.hash = decode(s.h, 'hex'))
      AND NOT EXISTS (SELECT FROM history_losses l, unnest(l.missing, l.hashes) AS m(p, h)
                      WHERE l.settled_at IS NOT NULL AND m.p = s.p AND m.h = s.h);
    IF lost_positions IS NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO history_losses (found_by, missing, hashes, reason)
    VALUES (session_user, lost_positions, lost_hashes, 'events seen committed are missing')
    ON CONFLICT ((true)) WHERE settled_at IS NULL DO NOTHING;
    SELECT loss_id INTO open_id FROM history_losses WHERE settled_at IS NULL;
    RETURN open_id;
END
$function$;
