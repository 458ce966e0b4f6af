-- Appends leaves to the stored Merkle tree. Appends to the journal do no tree work: the tree is
-- integrated at digest time and in the background. It takes the state row's lock and writes
-- only if the size is still p_old_size (else false: another integrator went first). It refuses
-- a boundary at or above the horizon (an event still being written could sort before it), a
-- leaf count other than the events in the range, any set of tiles but exactly those the new
-- leaves change, tiles of the wrong width, a change to a stored hash, and any hash other than
-- the one it computes: level 0 from the events (RFC 6962 leaf hashes of their chain hashes),
-- each higher level's new entries from the level-0 up (the root of each tile that filled), and
-- the root from the new right edge. So whoever may call it (signoff_reviewer) can only store
-- the tree the events hash to; `ledger verify` still recomputes every tile from the events.
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
    expected bytea;  -- the new entries of the level being checked, computed from below
    given bytea;     -- that level's tiles as given, concatenated in index order
    stored bytea;
    full_tiles bytea;
    held integer;
    width integer;
    entries bigint;
    lvl integer := 0;
    run integer;
    edge bytea;
    node bytea;
    root bytea;
    n integer := coalesce(cardinality(p_levels), 0);
BEGIN
    SELECT * INTO s FROM tree_state FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the stored tree has no state row' USING ERRCODE = '22023';
    END IF;
    IF s.tree_size <> p_old_size THEN
        RETURN false;  -- another integrator went first: nothing to do
    END IF;
    IF p_new_size IS NULL OR p_new_size <= p_old_size OR n <> coalesce(cardinality(p_indexes), 0)
            OR n <> coalesce(cardinality(p_tiles), 0) OR p_root IS NULL
            OR octet_length(p_root) <> 32 OR p_last_position IS NULL THEN
        RAISE EXCEPTION 'an integration appends leaves: a larger size, a root and its tiles'
            USING ERRCODE = '22023';
    END IF;
    IF boundary >= pg_snapshot_xmin(pg_current_snapshot()) THEN
        RAISE EXCEPTION 'transaction % is not below the horizon: its order is not final',
                boundary USING ERRCODE = '22023';
    END IF;
    SELECT count(*), string_agg(sha256('\x00'::bytea || e.hash), ''::bytea
                                ORDER BY e.txid, e.position)
        INTO counted, expected
        FROM events e
        WHERE (e.txid, e.position) > (s.last_txid, s.last_position)
          AND (e.txid, e.position) <= (boundary, p_last_position);
    IF counted <> p_new_size - p_old_size OR NOT EXISTS (
            SELECT FROM events WHERE position = p_last_position AND txid = boundary) THEN
        RAISE EXCEPTION 'the journal holds % events after leaf %, up to position %, not %',
                counted, p_old_size, p_last_position, p_new_size - p_old_size
            USING ERRCODE = '22023';
    END IF;
    -- Exactly the tiles that change: per level whose entry count grows, from the tile of its
    -- first new entry to the tile of its last. As many as that and each of them present, so
    -- no tile twice, none missing, none extra.
    IF n <> (SELECT count(*)
             FROM generate_series(0, 7) AS w(wl),
                  generate_series((p_old_size >> (8 * wl)) / 256,
                                  ((p_new_size >> (8 * wl)) - 1) / 256) AS v(wi)
             WHERE (p_new_size >> (8 * wl)) > (p_old_size >> (8 * wl)))
        OR EXISTS (
            SELECT FROM generate_series(0, 7) AS w(wl),
                        generate_series((p_old_size >> (8 * wl)) / 256,
                                        ((p_new_size >> (8 * wl)) - 1) / 256) AS v(wi)
            WHERE (p_new_size >> (8 * wl)) > (p_old_size >> (8 * wl))
              AND NOT EXISTS (SELECT FROM unnest(p_levels, p_indexes) AS x(l, i)
                              WHERE x.l = w.wl AND x.i = v.wi)) THEN
        RAISE EXCEPTION 'the tiles given are not the tiles % new leaves change in a tree of %',
                p_new_size - p_old_size, p_new_size USING ERRCODE = '22023';
    END IF;
    FOR i IN 1 .. n LOOP
        entries := p_new_size >> (8 * p_levels[i]);
        width := least(256, entries - p_indexes[i] * 256)::integer;
        IF p_tiles[i] IS NULL OR octet_length(p_tiles[i]) <> 32 * width THEN
            RAISE EXCEPTION 'tile %/% is not a tile of a tree of % leaves',
                    p_levels[i], p_indexes[i], p_new_size USING ERRCODE = '22023';
        END IF;
    END LOOP;
    -- Level by level from the leaves: the entries a level already held are the stored ones
    -- (tiles only grow), its new entries are `expected`, and the tiles that filled give the
    -- next level's new entries (each its 256 entries hashed pairwise, 8 times).
    WHILE (p_new_size >> (8 * lvl)) > (p_old_size >> (8 * lvl)) LOOP
        held := ((p_old_size >> (8 * lvl)) % 256)::integer;
        SELECT string_agg(x.t, ''::bytea ORDER BY x.i) INTO given
            FROM unnest(p_levels, p_indexes, p_tiles) AS x(l, i, t)
            WHERE x.l = lvl;
        IF held > 0 THEN
            SELECT k.hashes INTO stored FROM tree_tiles k
                WHERE k.level = lvl AND k.index = (p_old_size >> (8 * lvl)) / 256;
            IF stored IS NULL OR octet_length(stored) < 32 * held
                    OR substring(given FROM 1 FOR 32 * held)
                       <> substring(stored FROM 1 FOR 32 * held) THEN
                RAISE EXCEPTION 'tile %/% given changes hashes already integrated',
                        lvl, (p_old_size >> (8 * lvl)) / 256 USING ERRCODE = '22023';
            END IF;
        END IF;
        IF substring(given FROM 32 * held + 1) IS DISTINCT FROM expected THEN
            RAISE EXCEPTION 'the level-% tiles given are not what the events after leaf % hash to',
                    lvl, p_old_size USING ERRCODE = '22023';
        END IF;
        full_tiles := substring(given FROM 1 FOR 8192 * (octet_length(given) / 8192));
        FOR h IN 1 .. 8 LOOP
            SELECT string_agg(sha256('\x01'::bytea || substring(full_tiles FROM 64 * j + 1 FOR 64)),
                              ''::bytea ORDER BY j)
                INTO full_tiles
                FROM generate_series(0, octet_length(full_tiles) / 64 - 1) AS j;
        END LOOP;
        expected := full_tiles;  -- NULL when no tile filled: then no level above changes
        lvl := lvl + 1;
    END LOOP;
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
    -- The root from the new right edge (RFC 6962): the perfect runs of each level's partial
    -- tile, folded from the right (level 0's smallest run first).
    lvl := 0;
    WHILE (p_new_size >> (8 * lvl)) > 0 LOOP
        width := ((p_new_size >> (8 * lvl)) % 256)::integer;
        IF width > 0 THEN
            SELECT substring(k.hashes FROM 1 FOR 32 * width) INTO edge FROM tree_tiles k
                WHERE k.level = lvl AND k.index = (p_new_size >> (8 * lvl)) / 256;
            IF edge IS NULL OR octet_length(edge) < 32 * width THEN
                RAISE EXCEPTION 'the stored tree lacks tile %/%',
                        lvl, (p_new_size >> (8 * lvl)) / 256 USING ERRCODE = '22023';
            END IF;
            FOR b IN 0 .. 7 LOOP
                CONTINUE WHEN width & (1 << b) = 0;
                run := 1 << b;
                node := substring(edge FROM 32 * (width - run) + 1 FOR 32 * run);
                width := width - run;
                FOR h IN 1 .. b LOOP
                    SELECT string_agg(sha256('\x01'::bytea || substring(node FROM 64 * j + 1 FOR 64)),
                                      ''::bytea ORDER BY j)
                        INTO node
                        FROM generate_series(0, octet_length(node) / 64 - 1) AS j;
                END LOOP;
                root := CASE WHEN root IS NULL THEN node
                             ELSE sha256('\x01'::bytea || node || root) END;
            END LOOP;
        END IF;
        lvl := lvl + 1;
    END LOOP;
    IF root IS DISTINCT FROM p_root THEN
        RAISE EXCEPTION 'the root given is not the root of the % leaves the events hash to',
                p_new_size USING ERRCODE = '22023';
    END IF;
    UPDATE tree_state SET tree_size = p_new_size, last_txid = boundary,
            last_position = p_last_position, root = p_root, integrated_at = now();
    RETURN true;
END
$function$;
