"""The stored Merkle tree cannot be poisoned: no login but the owner plants a forged tile at any
level, the digest signs no root it has not checked against the events, and a proof of a made-up
event never verifies against a signed digest. Written as a stolen login would act."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from ledger.audit.digest import DigestMismatch, export_event, signing_keys, take_digest
from ledger.audit.merkle import MerkleTree, leaf_hash
from ledger.audit.tiles import TILE_HEIGHT, TileAppender, TileKey, TileReader
from ledger.audit.tree import integrate, read_state
from ledger.audit.verifier import InclusionProof, Invalid, check_inclusion
from ledger.canonical import GENESIS_HASH
from ledger.journal import Journal
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.logins import temporary_login
from tests.support.scratch import scratch_database

from .support.processes import TEST_KEK, kek_env, run_cli
from .test_digest import all_events, settle
from .test_stored_tree import append

ROLES = ("signoff_app", "signoff_reviewer", "signoff_key_admin", "signoff_auditor")
# Integrated by the owner first, then the attacker's integration: it fills level-0 tiles 254
# and 255, so level-1 tile 0, so creates level-2 entry 0 (a tree of three levels).
OLD_SIZE = 65_536 - 2 * 256
NEW_SIZE = 65_536 + 256 + 100  # and a partial tile at levels 0, 1 and 2
FORGED_LEAF = OLD_SIZE + 5
INTEGRATE = "SELECT signoff_tree_integrate($1, $2, $3, $4, $5, $6, $7, $8)"


@pytest.fixture
async def tree_url(server_url: str) -> AsyncIterator[str]:
    async with scratch_database(server_url, prefix="signoff_forgery") as url:
        yield url


def changed_keys(old: int, new: int) -> list[TileKey]:
    """The tiles an integration from `old` to `new` leaves writes."""
    keys, level = [], 0
    while (new >> (TILE_HEIGHT * level)) > (old >> (TILE_HEIGHT * level)):
        first = (old >> (TILE_HEIGHT * level)) // 256
        last = ((new >> (TILE_HEIGHT * level)) - 1) // 256
        keys += [(level, i) for i in range(first, last + 1)]
        level += 1
    return keys


def all_tiles(hashes: list[bytes]) -> dict[TileKey, bytes]:
    appender = TileAppender(0, {})
    for h in hashes:
        appender.append(h)
    return appender.tiles()


async def test_no_role_plants_a_forged_tile_at_any_level(tree_url: str) -> None:
    async with await Database.connect(tree_url) as db:
        ring = await KeyRing.open(db, LocalKek(TEST_KEK))
        journal = Journal(db)
        async with db.connection() as conn:
            have = await conn.fetchval("SELECT count(*) FROM events")
        await append(journal, OLD_SIZE - have, per_append=1000)
        await settle(db)
        assert (await integrate(db)).tree_size == OLD_SIZE
        await append(journal, NEW_SIZE - OLD_SIZE, per_append=50)
        await settle(db)
        events = await all_events(journal)
        assert len(events) == NEW_SIZE
        honest = [leaf_hash(e.hash) for e in events]

        # A made-up approval, hashed as the verifier will, put in the tree at FORGED_LEAF.
        real = export_event(events[FORGED_LEAF], GENESIS_HASH)
        made_up = dataclasses.replace(
            real,
            stream_id="approval:made-up",
            version=1,
            type="approval.decided",
            data=json.dumps({"decision": "approve", "by": "cfo"}),
            prev_hash=GENESIS_HASH,
        )
        made_up = dataclasses.replace(made_up, hash=made_up.recomputed_hash())
        forged = list(honest)
        forged[FORGED_LEAF] = leaf_hash(made_up.hash)
        honest_tiles, forged_tiles = all_tiles(honest), all_tiles(forged)
        keys = changed_keys(OLD_SIZE, NEW_SIZE)
        assert max(level for level, _ in keys) == 2
        last = events[-1]
        forged_proof = InclusionProof(
            NEW_SIZE,
            MerkleTree(forged).root(),
            FORGED_LEAF,
            tuple(MerkleTree(forged).inclusion_proof(FORGED_LEAF)),
            made_up,
        )

        def attempt(level: int) -> tuple[object, ...]:
            """The integration a login sends: the honest tiles below `level`, the forged
            ones from `level` up, and the root they give (what a digest would sign)."""
            tiles = {k: (forged_tiles if k[0] >= level else honest_tiles)[k] for k in keys}
            root = TileReader(NEW_SIZE, {**honest_tiles, **tiles}).root()
            assert root == MerkleTree(forged).root(), "the forgery reaches the root"
            return (
                OLD_SIZE,
                NEW_SIZE,
                str(last.txid),
                last.position,
                root,
                [k[0] for k in keys],
                [k[1] for k in keys],
                [tiles[k] for k in keys],
            )

        for role in ROLES:
            async with temporary_login(tree_url, role) as url:
                conn = await asyncpg.connect(url)
                try:
                    for level in range(3):
                        refusal = (
                            asyncpg.InvalidParameterValueError
                            if role == "signoff_reviewer"  # may integrate: what it sends is checked
                            else asyncpg.InsufficientPrivilegeError
                        )
                        with pytest.raises(refusal):
                            await conn.fetchval(INTEGRATE, *attempt(level))
                    with pytest.raises(asyncpg.InsufficientPrivilegeError):
                        await conn.execute("UPDATE tree_tiles SET hashes = $1 WHERE level = 1", b"")
                    with pytest.raises(asyncpg.InsufficientPrivilegeError):
                        await conn.execute(
                            "INSERT INTO tree_tiles (level, index, hashes) VALUES (2, 0, $1)",
                            forged_tiles[(2, 0)],
                        )
                    with pytest.raises(asyncpg.InsufficientPrivilegeError):
                        await conn.execute("UPDATE tree_state SET root = $1", bytes(32))
                finally:
                    await conn.close()
            async with db.connection() as conn:
                assert (await read_state(conn)).size == OLD_SIZE, f"{role} wrote the tree"

        digest = await take_digest(db, ring)
        assert (digest.tree_size, digest.root) == (NEW_SIZE, MerkleTree(honest).root())
        with pytest.raises(Invalid):
            check_inclusion(
                digest, dataclasses.replace(forged_proof, root=digest.root), signing_keys(ring)
            )


async def test_the_digest_signs_no_root_it_has_not_checked(tree_url: str, tmp_path: Path) -> None:
    """The owner (who alone may write the tables) edits the stored right edge at each level:
    `ledger digest` refuses, exit 1, and writes nothing; the edit undone, it signs again."""
    async with await Database.connect(tree_url) as db:
        ring = await KeyRing.open(db, LocalKek(TEST_KEK))
        journal = Journal(db)
        await append(journal, NEW_SIZE - 6, per_append=1000)  # and the key ring's 6
        await settle(db)
        first = await take_digest(db, ring)
        assert first.tree_size == NEW_SIZE
        for level, index in ((0, 257), (1, 1), (2, 0)):
            async with db.connection() as conn:
                genuine = await conn.fetchval(
                    "SELECT hashes FROM tree_tiles WHERE level = $1 AND index = $2", level, index
                )
                assert genuine is not None, f"no right-edge tile {level}/{index}"
                await conn.execute(
                    "UPDATE tree_tiles SET hashes = overlay(hashes PLACING $3 FROM 1) "
                    "WHERE level = $1 AND index = $2",
                    level,
                    index,
                    b"\x07" * 32,
                )
            with pytest.raises(DigestMismatch, match="nothing signed"):
                await take_digest(db, ring)
            out = tmp_path / f"digest-{level}.json"
            refused = await run_cli(
                "ledger", "digest", "--out", str(out), database_url=tree_url, env=kek_env()
            )
            assert refused.code == 1, refused.stdout + refused.stderr
            assert "TAMPERED" in refused.stderr and "nothing signed" in refused.stderr
            assert not out.exists() and refused.stdout == ""
            async with db.connection() as conn:
                await conn.execute(
                    "UPDATE tree_tiles SET hashes = $3 WHERE level = $1 AND index = $2",
                    level,
                    index,
                    genuine,
                )
        again = await take_digest(db, ring)
        assert (again.tree_size, again.root) == (first.tree_size, first.root)
