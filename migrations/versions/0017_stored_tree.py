"""The journal's Merkle tree, stored as C2SP tlog-tiles and integrated incrementally.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-01

Digests and proofs used to rebuild the tree from every event; now the tree is kept, so a digest
costs the events since the last one and a proof O(log n) stored hashes.

Layout: the tlog-tiles of `ledger.audit.tiles` (tile height 8). `tree_tiles` holds one row per
tile, keyed by (level, index), its hashes concatenated (32 bytes each, 1 to 256 of them); the
right edge's partial tiles are rewritten as they grow, full tiles never change. Why tiles and
not one row per node: a row per 256 hashes keeps the table ~1/250 the size of the journal's
index, the hashes a proof needs are in at most two rows per level, an integration rewrites one
row per level plus the tiles it filled, and the rows are exactly the files a static tlog-tiles
export serves (`signoff ledger tiles export`). `tree_state` is one row: how many leaves are
integrated, the last leaf's journal boundary (`last_txid`, `last_position`: integration goes
on after it in the global order, below the horizon) and the root. Leaves are those of the
digests before this revision: one per event in `Journal.read_all` order, leaf data the event's
chain hash, so earlier digests and proofs stay valid.

Nothing is added to appends (no trigger): the tree is integrated at digest time and by
`signoff ledger integrate` and `signoff serve`'s background task, through
`signoff_tree_integrate`, SECURITY DEFINER, which

- takes the state row's lock (a second integrator waits, then finds the size moved and skips);
- writes only if the state still has the size the caller read (`p_old_size`), so two
  integrators never both append;
- refuses a boundary at or above the horizon (an event still being written could sort before
  it) and a leaf count that is not the number of events in the range;
- recomputes in SQL the level-0 hashes of the new leaves from the events and refuses tiles that
  differ, and refuses tiles of the wrong width for the new size.

Higher levels and the root are the caller's arithmetic over those leaves: `signoff ledger
verify` recomputes every tile and the root from the events and names any that differ.

Who may integrate: the roles that take digests, the owner (CLI) and `signoff_reviewer`
(`signoff serve`, whose auditors' `GET /v1/ledger/digest` signs one). No role but the owner
writes the tables directly, so workers (`signoff_app`) can neither integrate nor edit a stored
hash; they, auditors and key administrators may read the tree (`ledger verify` runs as a
worker's login and compares it with the events).
"""

from __future__ import annotations

from collections.abc import Sequence

from ledger.store.sqlscript import execute_script

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_DEFINER = "SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp"
_INTEGRATE = (
    "signoff_tree_integrate(bigint, bigint, text, bigint, bytea, integer[], bigint[], bytea[])"
)

TABLES = """
CREATE TABLE tree_tiles (
    level  integer NOT NULL CHECK (level BETWEEN 0 AND 7),
    index  bigint NOT NULL CHECK (index >= 0),
    hashes bytea NOT NULL
           CHECK (octet_length(hashes) BETWEEN 32 AND 8192 AND octet_length(hashes) % 32 = 0),
    -- Level 0: the journal boundary of the tile's first leaf, to find a position's leaf index
    -- in O(log n) (the tile, then at most 255 events after its first).
    first_txid     xid8,
    first_position bigint,
    PRIMARY KEY (level, index),
    CHECK ((level = 0) = (first_txid IS NOT NULL AND first_position IS NOT NULL))
);
CREATE UNIQUE INDEX tree_tiles_first_idx ON tree_tiles (first_txid, first_position)
    WHERE level = 0;
CREATE TABLE tree_state (
    singleton     boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    tree_size     bigint NOT NULL CHECK (tree_size >= 0),
    last_txid     xid8 NOT NULL,
    last_position bigint NOT NULL CHECK (last_position >= 0),
    root          bytea NOT NULL CHECK (octet_length(root) = 32),
    integrated_at timestamptz
);
INSERT INTO tree_state (tree_size, last_txid, last_position, root)
    VALUES (0, '0', 0, sha256(''::bytea));
"""

INTEGRATE = f"""
CREATE FUNCTION signoff_tree_integrate(
    p_old_size bigint, p_new_size bigint, p_last_txid text, p_last_position bigint,
    p_root bytea, p_levels integer[], p_indexes bigint[], p_tiles bytea[]
) RETURNS boolean LANGUAGE plpgsql {_DEFINER} AS $$
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
    SELECT count(*), string_agg(sha256('\\x00'::bytea || e.hash), ''::bytea
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
$$;
"""

GRANTS = f"""
REVOKE ALL ON tree_tiles, tree_state FROM PUBLIC;
GRANT SELECT ON tree_tiles, tree_state
    TO signoff_app, signoff_reviewer, signoff_auditor, signoff_key_admin;
REVOKE EXECUTE ON FUNCTION {_INTEGRATE} FROM PUBLIC;
GRANT EXECUTE ON FUNCTION {_INTEGRATE} TO signoff_reviewer;
"""


def upgrade() -> None:
    execute_script(TABLES)
    execute_script(INTEGRATE)
    execute_script(GRANTS)


def downgrade() -> None:
    execute_script(f"DROP FUNCTION {_INTEGRATE}; DROP TABLE tree_tiles; DROP TABLE tree_state;")
