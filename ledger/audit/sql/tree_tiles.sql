-- The journal's Merkle tree, stored as C2SP tlog-tiles of height 8 (`ledger.audit.tiles`): one
-- row per tile, keyed by (level, index), its 1 to 256 hashes of 32 bytes concatenated. Full
-- tiles never change; the right edge's partial tiles are rewritten as they grow. A row per 256
-- hashes keeps the table about 1/250 the size of the journal's index, a proof reads at most two
-- rows per level, an integration rewrites one row per level plus the tiles it fills, and the
-- rows are the files a static tlog-tiles export serves. Leaves: one per event in the global
-- order, leaf data the event's chain hash. Written only by signoff_tree_integrate.
CREATE TABLE tree_tiles (
    level integer NOT NULL,
    index bigint NOT NULL,
    hashes bytea NOT NULL,
    -- Level 0: the journal boundary of the tile's first leaf, to find a position's leaf index
    -- in O(log n) (the tile, then at most 255 events after its first).
    first_txid xid8,
    first_position bigint,
    CONSTRAINT tree_tiles_check
        CHECK (((level = 0) = ((first_txid IS NOT NULL) AND (first_position IS NOT NULL)))),
    CONSTRAINT tree_tiles_hashes_check CHECK (octet_length(hashes) BETWEEN 32 AND 8192
        AND octet_length(hashes) % 32 = 0),
    CONSTRAINT tree_tiles_index_check CHECK ((index >= 0)),
    CONSTRAINT tree_tiles_level_check CHECK (((level >= 0) AND (level <= 7))),
    CONSTRAINT tree_tiles_pkey PRIMARY KEY (level, index)
);
CREATE UNIQUE INDEX tree_tiles_first_idx ON tree_tiles (first_txid, first_position)
    WHERE (level = 0);
