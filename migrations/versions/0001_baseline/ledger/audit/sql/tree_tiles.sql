CREATE TABLE tree_tiles (
    level integer NOT NULL,
    index bigint NOT NULL,
    hashes bytea NOT NULL,
    first_txid xid8,
    first_position bigint,
    CONSTRAINT tree_tiles_check CHECK (((level = 0) = ((first_txid IS NOT NULL) AND (first_position IS NOT NULL)))),
    CONSTRAINT tree_tiles_hashes_check CHECK (octet_length(hashes) BETWEEN 32 AND 8192
        AND octet_length(hashes) % 32 = 0),
    CONSTRAINT tree_tiles_index_check CHECK ((index >= 0)),
    CONSTRAINT tree_tiles_level_check CHECK (((level >= 0) AND (level <= 7))),
    CONSTRAINT tree_tiles_pkey PRIMARY KEY (level, index)
);
CREATE UNIQUE INDEX tree_tiles_first_idx ON tree_tiles (first_txid, first_position) WHERE (level = 0);
