-- Appends leaves to the stored Merkle tree. Appends to the journal do no tree work: the tree is
-- integrated at digest time and in the background. It takes the state row's lock and writes
-- only if the size is still p_old_size (else false: another integrator went first). It refuses
-- a boundary at or above the horizon (an event still being written could sort before it), a
-- leaf count other than the events in the range, tiles of the wrong width for the new size, a
-- change to a stored hash, and level-0 tiles other than the hashes it computes from the events.
-- Higher levels and the root are the caller's arithmetic; `ledger verify` recomputes every tile
-- and the root from the events.
CREATE OR REPLACE FUNCTION public.signoff_tree_integrate(p_old_size bigint, p_new_size bigint, p_last_txid text, p_last_position bigint, p_root bytea, p_levels integer[], p_indexes bigint[], p_tiles bytea[])
 RETURNS boolean
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
DECLARE
    s tree_state;
    boundary xid8 := p_last_txid::xid8;
    counted bigint;
    computed bytea;
    given bytea;
    width integer;
    entries bigint;
    n integer := coalesce(cardinality(p_levels), 0);
BEGIN
    SELECT * INTO s FROM tree_state FOR UPDATE;
    IF s.tree_size <> p_old_size THEN
        RETURN false;  -- another integrator went first: nothing to do
    END IF;
    IF p_new_size <= p_old_size OR n <> cardinality(p_indexes) OR n <> cardinality(p_tiles)
            OR octet_length(p_root) <> 32 THEN
        RAISE EXCEPTION 'an integration appends leaves: a larger size, a root and its tiles'
            USING ERRCODE = '22023';
    END IF;
    IF boundary >= pg_snapshot_xmin(pg_current_snapshot()) THEN
        RAISE EXCEPTION 'transaction % is not below the horizon: its order is not final',
                boundary USING ERRCODE = '22023';
    END IF;
    SELECT count(*), string_agg(sha256('\x00'::bytea || e.hash), ''::bytea
                                ORDER BY e.txid, e.position)
        INTO counted, computed
        FROM events e
        WHERE (e.txid, e.position) > (s.last_txid, s.last_position)
          AND (e.txid, e.position) <= (boundary, p_last_position);
    IF counted <> p_new_size - p_old_size OR NOT EXISTS (
            SELECT FROM events WHERE position = p_last_position AND txid = boundary) THEN
        RAISE EXCEPTION 'the journal holds % events after leaf %, up to position %, not %',
                counted, p_old_size, p_last_position, p_new_size - p_old_size
            USING ERRCODE = '22023';
    END IF;
    FOR i IN 1 .. n LOOP
        entries := p_new_size >> (8 * p_levels[i]);
        width := CASE WHEN p_indexes[i] < entries / 256 THEN 256
                      ELSE (entries % 256)::integer END;
        IF p_levels[i] IS NULL OR p_indexes[i] IS NULL OR p_levels[i] NOT BETWEEN 0 AND 7
                OR p_indexes[i] > entries / 256 OR width = 0
                OR octet_length(p_tiles[i]) <> 32 * width THEN
            RAISE EXCEPTION 'tile %/% is not a tile of a tree of % leaves',
                    p_levels[i], p_indexes[i], p_new_size USING ERRCODE = '22023';
        END IF;
    END LOOP;
    -- Tiles only grow: what a stored tile holds stays the start of it.
    IF EXISTS (
            SELECT FROM unnest(p_levels, p_indexes, p_tiles) AS x(l, i, t)
            JOIN tree_tiles k ON k.level = x.l AND k.index = x.i
            WHERE substring(x.t FROM 1 FOR octet_length(k.hashes)) <> k.hashes) THEN
        RAISE EXCEPTION 'a tile given changes hashes already integrated' USING ERRCODE = '22023';
    END IF;
    -- The new leaves' hashes, as the level-0 tiles given hold them.
    SELECT substring(string_agg(t, ''::bytea ORDER BY i)
                     FROM ((p_old_size % 256) * 32 + 1)::integer)
        INTO given
        FROM unnest(p_levels, p_indexes, p_tiles) AS x(l, i, t)
        WHERE l = 0 AND i >= p_old_size / 256;
    IF given IS DISTINCT FROM computed THEN
        RAISE EXCEPTION 'the level-0 tiles given are not the hashes of the events after leaf %',
                p_old_size USING ERRCODE = '22023';
    END IF;
    WITH fresh AS (
        SELECT e.txid, e.position,
               p_old_size - 1 + row_number() OVER (ORDER BY e.txid, e.position) AS leaf
        FROM events e
        WHERE (e.txid, e.position) > (s.last_txid, s.last_position)
          AND (e.txid, e.position) <= (boundary, p_last_position)
    )
    INSERT INTO tree_tiles AS k (level, index, hashes, first_txid, first_position)
        SELECT x.l, x.i, x.t, coalesce(f.txid, old.first_txid),
               coalesce(f.position, old.first_position)
        FROM unnest(p_levels, p_indexes, p_tiles) AS x(l, i, t)
        LEFT JOIN fresh f ON x.l = 0 AND f.leaf = x.i * 256
        LEFT JOIN tree_tiles old ON old.level = x.l AND old.index = x.i
        ON CONFLICT (level, index) DO UPDATE SET hashes = excluded.hashes;
    UPDATE tree_state SET tree_size = p_new_size, last_txid = boundary,
            last_position = p_last_position, root = p_root, integrated_at = now();
    RETURN true;
END
$function$;
