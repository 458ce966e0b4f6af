-- The stored tree's one row: how many leaves are integrated, the last leaf's journal boundary
-- (`last_txid`, `last_position`: integration goes on after it in the global order) and the
-- root. Integrators lock it, so they take turns. It starts as the empty tree, whose root is
-- SHA-256 of nothing (RFC 6962).
CREATE TABLE tree_state (
    singleton boolean DEFAULT true NOT NULL,
    tree_size bigint NOT NULL,
    last_txid xid8 NOT NULL,
    last_position bigint NOT NULL,
    root bytea NOT NULL,
    integrated_at timestamp with time zone,
    CONSTRAINT tree_state_last_position_check CHECK ((last_position >= 0)),
    CONSTRAINT tree_state_root_check CHECK ((octet_length(root) = 32)),
    CONSTRAINT tree_state_singleton_check CHECK (singleton),
    CONSTRAINT tree_state_tree_size_check CHECK ((tree_size >= 0)),
    CONSTRAINT tree_state_pkey PRIMARY KEY (singleton)
);
INSERT INTO tree_state VALUES
    (true, 0, '0', 0, '\xe3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855', NULL);
