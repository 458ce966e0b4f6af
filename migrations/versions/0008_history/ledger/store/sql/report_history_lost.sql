-- A process's report that the database lacks events it saw committed: `p_positions` and the
-- chain hashes (hex) it saw there. The report is checked, not trusted: only the positions the
-- database lacks, or holds with another hash, are recorded, and nothing is when it holds them
-- all. Opens a loss (`history_losses`) unless one is open. Returns the open loss's id, NULL
-- when nothing was lost.
CREATE OR REPLACE FUNCTION public.signoff_report_history_lost(p_positions bigint[], p_hashes text[])
 RETURNS bigint
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
DECLARE
    lost bigint[];
    open_id bigint;
BEGIN
    IF cardinality(p_positions) IS DISTINCT FROM cardinality(p_hashes) THEN
        RAISE EXCEPTION 'as many positions as hashes' USING ERRCODE = '22023';
    END IF;
    SELECT array_agg(s.p ORDER BY s.p) INTO lost
    FROM unnest(p_positions, p_hashes) AS s(p, h)
    WHERE NOT EXISTS (SELECT FROM events e WHERE e.position = s.p AND e.hash = decode(s.h, 'hex'));
    IF lost IS NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO history_losses (found_by, missing, reason)
    VALUES (session_user, lost, 'events seen committed are missing')
    ON CONFLICT ((true)) WHERE settled_at IS NULL DO NOTHING;
    SELECT loss_id INTO open_id FROM history_losses WHERE settled_at IS NULL;
    RETURN open_id;
END
$function$;
