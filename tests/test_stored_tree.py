"""The stored Merkle tree: integrated incrementally and concurrently, the same
tree the events hash to, written only through its function, and every edit to it found."""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest

from adapters.http.service import open_service
from ledger.audit.digest import (
    DigestMismatch,
    prove_consistency,
    prove_inclusion,
    signing_keys,
    take_digest,
    verify_digest,
)
from ledger.audit.merkle import MerkleTree, leaf_hash
from ledger.audit.tiles import TILE_WIDTH, TileAppender, tile_path, tiles_of
from ledger.audit.tree import check_stored_tree, integrate, open_view, read_state
from ledger.audit.verifier import check_consistency, check_inclusion
from ledger.errors import PermissionDenied
from ledger.journal import Journal, NewEvent
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.logins import temporary_login
from ledger.store.settings import Settings
from tests.support.http import token_for
from tests.support.scratch import scratch_database

from .support.processes import ROOT, TEST_KEK, TEST_REVIEWER_KEK, kek_env, run_cli
from .test_digest import all_events, run_verifier, settle


@pytest.fixture
async def tree_url(server_url: str) -> AsyncIterator[str]:
    async with scratch_database(server_url, prefix="signoff_tree") as url:
        yield url


@pytest.fixture
async def tree_db(tree_url: str) -> AsyncIterator[Database]:
    async with await Database.connect(tree_url) as db:
        yield db


async def append(journal: Journal, count: int, *, per_append: int = 1) -> None:
    """`count` events, `per_append` to a stream per transaction, in streams of their own."""
    done = 0
    while done < count:
        n = min(per_append, count - done)
        events = [NewEvent("tree.happened", {"i": done + i}, actor="t") for i in range(n)]
        await journal.append(f"tree:{uuid.uuid4().hex}", events, expected_version=0)
        done += n


async def leaves(journal: Journal) -> list[bytes]:
    return [leaf_hash(e.hash) async for e in journal.read_all()]


async def stored_tiles(db: Database) -> dict[tuple[int, int], bytes]:
    async with db.connection() as conn:
        rows = await conn.fetch("SELECT level, index, hashes FROM tree_tiles")
    return {(r["level"], r["index"]): bytes(r["hashes"]) for r in rows}


def tiles_from_scratch(hashes: list[bytes]) -> dict[tuple[int, int], bytes]:
    appender = TileAppender(0, {})
    for h in hashes:
        appender.append(h)
    return appender.tiles()


async def test_batches_of_any_size_store_the_tree_the_events_hash_to(tree_db: Database) -> None:
    journal = Journal(tree_db)
    rng = random.Random(7)
    for _ in range(6):
        await append(journal, rng.randint(1, 400), per_append=rng.randint(1, 50))
        await settle(tree_db)
        done = await integrate(tree_db, batch_size=rng.randint(1, 300))
        assert done.integrated > 0 and not done.skipped
        hashes = await leaves(journal)
        assert done.tree_size == len(hashes)
        assert await stored_tiles(tree_db) == tiles_from_scratch(hashes)
        async with tree_db.connection() as conn:
            state = await read_state(conn)
        assert state.root == MerkleTree(hashes).root()
        assert state.last_position == (await all_events(journal))[-1].position
    again = await integrate(tree_db)
    assert (again.integrated, again.tree_size) == (0, len(hashes)), "integration is idempotent"
    assert (await check_stored_tree(tree_db)).ok


async def test_digests_and_proofs_from_the_stored_tree_are_todays(tree_db: Database) -> None:
    """The same roots and proofs as the in-memory tree, for a tree that is partly stored and
    partly past the stored edge."""
    ring = await KeyRing.open(tree_db, LocalKek(TEST_KEK))
    journal = Journal(tree_db)
    await append(journal, 700, per_append=9)
    await settle(tree_db)
    old = await take_digest(tree_db, ring)
    await append(journal, 300, per_append=7)
    await settle(tree_db)
    new = await take_digest(tree_db, ring)
    events = await all_events(journal)
    tree = MerkleTree(leaf_hash(e.hash) for e in events)
    assert (old.root, new.root) == (tree.root(old.tree_size), tree.root())
    keys = signing_keys(ring)
    for index in random.Random(3).sample(range(new.tree_size), 40):
        proof = await prove_inclusion(tree_db, events[index].position, new)
        assert (proof.leaf_index, list(proof.audit_path)) == (index, tree.inclusion_proof(index))
        check_inclusion(new, proof, keys)
    consistency = await prove_consistency(tree_db, old, new)
    assert list(consistency.proof) == tree.consistency_proof(old.tree_size)
    check_consistency(old, new, consistency, keys)
    assert (await verify_digest(tree_db, new, keys)).ok
    assert (await verify_digest(tree_db, new, keys, since=old)).ok


async def test_a_tree_past_the_stored_one_is_hashed_in_memory(tree_db: Database) -> None:
    journal = Journal(tree_db)
    await append(journal, 300)
    await settle(tree_db)
    await integrate(tree_db)
    await append(journal, 50)
    await settle(tree_db)
    async with tree_db.connection() as conn, conn.transaction(isolation="repeatable_read"):
        view = await open_view(conn)
        root = await view.read(lambda reader: reader.root())
        assert (view.state.size, view.size) == (300, 350)
    assert root == MerkleTree(await leaves(journal)).root()


async def test_the_function_refuses_tiles_that_are_not_the_events(tree_db: Database) -> None:
    journal = Journal(tree_db)
    await append(journal, 10)
    await settle(tree_db)
    hashes = await leaves(journal)
    call = "SELECT signoff_tree_integrate(0, $1, $2, $3, $4, $5, $6, $7)"
    async with tree_db.connection() as conn:
        last = await conn.fetchrow(
            "SELECT txid::text, position FROM events ORDER BY txid DESC, position DESC LIMIT 1"
        )
        forged = [os.urandom(32), *hashes[1:]]
        root = MerkleTree(forged).root()
        for tiles, message in (
            ([b"".join(forged)], "level-0 tiles"),
            ([b"".join(hashes[:9])], "not a tile"),
        ):
            with pytest.raises(asyncpg.InvalidParameterValueError, match=message):
                await conn.fetchval(call, 10, last[0], last[1], root, [0], [0], tiles)
        with pytest.raises(asyncpg.InvalidParameterValueError, match="events after leaf"):
            await conn.fetchval(call, 9, last[0], last[1], root, [0], [0], [b"".join(hashes)])
        state = await read_state(conn)
    assert state.size == 0, "a refused integration writes nothing"
    assert await stored_tiles(tree_db) == {}


async def test_only_the_owner_and_reviewers_integrate_and_nobody_edits_a_hash(
    tree_url: str, tree_db: Database
) -> None:
    journal = Journal(tree_db)
    await append(journal, 5)
    await settle(tree_db)
    await integrate(tree_db)
    for roles in (("signoff_app",), ("signoff_auditor",), ()):  # (): PUBLIC alone
        async with temporary_login(tree_url, *roles) as url:
            conn = await asyncpg.connect(url)
            try:
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    await conn.execute("UPDATE tree_tiles SET hashes = hashes || hashes")
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    await conn.execute("UPDATE tree_state SET tree_size = 0")
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    await conn.fetchval(
                        "SELECT signoff_tree_integrate(0, 1, '0', 1, $1, '{}', '{}', '{}')",
                        bytes(32),
                    )
            finally:
                await conn.close()
    await append(journal, 5)
    await settle(tree_db)
    async with (
        temporary_login(tree_url, "signoff_reviewer") as url,
        await Database.connect(url) as reviewer,
    ):
        done = await integrate(reviewer)
        with pytest.raises(PermissionDenied):
            async with reviewer.connection() as conn:
                await conn.execute("DELETE FROM tree_tiles")
    assert (done.integrated, done.tree_size) == (5, 10)
    assert (await check_stored_tree(tree_db)).ok


async def test_a_worker_digest_hashes_past_the_stored_tree_without_writing_it(
    tree_url: str, tree_db: Database
) -> None:
    ring = await KeyRing.open(tree_db, LocalKek(TEST_KEK))
    journal = Journal(tree_db)
    await append(journal, 300)
    await settle(tree_db)
    await integrate(tree_db)
    await append(journal, 40)
    await settle(tree_db)
    async with (
        temporary_login(tree_url, "signoff_app") as url,
        await Database.connect(url) as worker,
    ):
        digest = await take_digest(worker, await KeyRing.open(worker, LocalKek(TEST_KEK)))
    async with tree_db.connection() as conn:
        assert (await read_state(conn)).size == 306  # 300 and the key ring's 6
    assert digest.tree_size == 346
    assert digest.root == MerkleTree(await leaves(journal)).root()
    assert (await verify_digest(tree_db, digest, signing_keys(ring))).ok


_INTEGRATOR = """
import asyncio, json, sys
from ledger.audit.tree import integrate
from ledger.store import Database

async def main(url: str, rounds: int) -> None:
    async with await Database.connect(url) as db:
        total = 0
        for _ in range(rounds):
            total += (await integrate(db, batch_size=37, wait=sys.argv[3] == "wait")).integrated
            await asyncio.sleep(0.01)
        print(json.dumps({"integrated": total}))

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


async def test_integrators_in_several_processes_while_writers_append(
    tree_url: str, tree_db: Database
) -> None:
    """Four integrator processes (two wait for the lock, two skip) race writers: every event is
    integrated exactly once and the stored tree is the events'."""
    journal = Journal(tree_db)
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _INTEGRATOR,
            tree_url,
            "40",
            "wait" if i % 2 else "skip",
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        for i in range(4)
    ]
    await asyncio.gather(*(append(journal, 150, per_append=3) for _ in range(4)))
    outputs = [await asyncio.wait_for(p.communicate(), 120) for p in processes]
    assert all(p.returncode == 0 for p in processes), [e.decode()[-800:] for _, e in outputs]
    by_processes = sum(json.loads(out)["integrated"] for out, _ in outputs)
    await settle(tree_db)
    rest = await integrate(tree_db)
    assert by_processes + rest.integrated == rest.tree_size == len(await leaves(journal)) == 600
    assert await stored_tiles(tree_db) == tiles_from_scratch(await leaves(journal))


async def test_an_integrator_killed_mid_batch_leaves_a_tree_the_next_one_finishes(
    tree_url: str, tree_db: Database
) -> None:
    journal = Journal(tree_db)
    await append(journal, 3000, per_append=100)
    await settle(tree_db)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _INTEGRATOR.replace("batch_size=37", "batch_size=7"),
        tree_url,
        "1000",
        "wait",
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        for _ in range(600):  # until it has committed a few batches, then mid-way
            async with tree_db.connection() as conn:
                if (await read_state(conn)).size >= 70:
                    break
            await asyncio.sleep(0.01)
    finally:
        process.kill()
        await process.wait()
    assert (await check_stored_tree(tree_db)).ok, "each batch committed whole"
    # The killed client's backend holds the lock until it notices the client is gone, and
    # may commit a batch whose COMMIT was already sent: the next integrator waits for it.
    rest = await integrate(tree_db, wait=True)
    killed_at = rest.tree_size - rest.integrated
    assert 0 < killed_at < 3000
    assert rest.tree_size == 3000
    assert await stored_tiles(tree_db) == tiles_from_scratch(await leaves(journal))


async def test_ledger_verify_names_an_edited_tile_hash_and_state_root(
    tree_url: str, tree_db: Database
) -> None:
    ring = await KeyRing.open(tree_db, LocalKek(TEST_KEK))
    journal = Journal(tree_db)
    await append(journal, 2 * TILE_WIDTH + 20, per_append=11)
    await settle(tree_db)
    digest = await take_digest(tree_db, ring)
    events = await all_events(journal)
    ok = await run_cli("ledger", "verify", database_url=tree_url, env=kek_env())
    assert ok.code == 0, ok.stdout + ok.stderr
    assert "stored Merkle tree" in ok.stdout
    forged = os.urandom(32)
    async with tree_db.connection() as conn:  # the owner: nothing but a CHECK guards the rows
        await conn.execute(
            "UPDATE tree_tiles SET hashes = overlay(hashes PLACING $1 FROM 97) "
            "WHERE level = 0 AND index = 1",
            forged,
        )
    found = await run_cli("ledger", "verify", database_url=tree_url, env=kek_env())
    assert found.code == 1
    assert "tile 0/1 hash 3" in found.stdout and forged.hex() in found.stdout
    with pytest.raises(DigestMismatch, match="leaf 259"):
        await prove_inclusion(tree_db, events[TILE_WIDTH + 3].position, digest)
    # A proof elsewhere still verifies: its path does not cross the edited tile.
    check_inclusion(
        digest, await prove_inclusion(tree_db, events[5].position, digest), signing_keys(ring)
    )
    async with tree_db.connection() as conn:
        await conn.execute("UPDATE tree_state SET root = $1", bytes(32))
    rooted = await run_cli("ledger", "verify", "--json", database_url=tree_url, env=kek_env())
    problems = json.loads(rooted.stdout)["problems"]
    assert any("state's root is " + "00" * 32 in p for p in problems)


async def test_no_digest_signs_a_tampered_edge_tile(tree_db: Database) -> None:
    ring = await KeyRing.open(tree_db, LocalKek(TEST_KEK))
    journal = Journal(tree_db)
    await append(journal, 40)
    await settle(tree_db)
    await integrate(tree_db)
    async with tree_db.connection() as conn:
        await conn.execute(
            "UPDATE tree_tiles SET hashes = overlay(hashes PLACING $1 FROM 1) WHERE level = 0",
            os.urandom(32),
        )
    with pytest.raises(DigestMismatch, match="nothing signed"):
        await take_digest(tree_db, ring)  # the stored root is checked against the events


async def test_verify_since_an_earlier_digest_reads_only_what_came_after(
    tree_url: str, tree_db: Database, tmp_path: Path
) -> None:
    ring = await KeyRing.open(tree_db, LocalKek(TEST_KEK))
    journal = Journal(tree_db)
    await append(journal, 300, per_append=5)
    await settle(tree_db)
    old = await take_digest(tree_db, ring)
    await append(journal, 100, per_append=5)
    await settle(tree_db)
    new = await take_digest(tree_db, ring)
    (tmp_path / "old.json").write_text(old.to_json())
    (tmp_path / "new.json").write_text(new.to_json())
    args = ("ledger", "verify", "--digest", tmp_path / "new.json")
    since = (*args, "--since-digest", tmp_path / "old.json")
    result = await run_cli(*map(str, (*since, "--json")), database_url=tree_url, env=kek_env())
    assert result.code == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["digest"]["ok"] and report["events"] == new.tree_size - old.tree_size
    keys = signing_keys(ring)
    # An event after the earlier digest, edited: the resumed check finds it.
    events = await all_events(journal)
    async with tree_db.connection() as conn, conn.transaction():
        await conn.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
        await conn.execute(
            "UPDATE events SET data = '{\"i\": -1}' WHERE position = $1", events[-5].position
        )
        await conn.execute("ALTER TABLE events ENABLE TRIGGER events_append_only")
    edited = await run_cli(*map(str, since), database_url=tree_url, env=kek_env())
    assert edited.code == 1 and f"position {events[-5].position}" in edited.stdout
    # A stored hash under the earlier digest, edited (the root of tile 0/0): its stored tree
    # no longer hashes to the earlier digest's root, so nothing resumes from it.
    async with tree_db.connection() as conn:
        await conn.execute(
            "UPDATE tree_tiles SET hashes = overlay(hashes PLACING $1 FROM 1) "
            "WHERE level = 1 AND index = 0",
            os.urandom(32),
        )
    check = await verify_digest(tree_db, new, keys, since=old)
    assert not check.ok and "earlier digest's tree" in check.problems[0]
    resumed = await run_cli(*map(str, since), database_url=tree_url, env=kek_env())
    assert resumed.code == 1 and "do not hash to the verified digest's root" in resumed.stdout
    full = await run_cli(*map(str, (*since, "--full")), database_url=tree_url, env=kek_env())
    assert full.code == 1 and "tile 1/0 hash 0" in full.stdout


async def test_exported_tiles_check_out_offline(
    tree_url: str, tree_db: Database, tmp_path: Path
) -> None:
    ring = await KeyRing.open(tree_db, LocalKek(TEST_KEK))
    journal = Journal(tree_db)
    await append(journal, TILE_WIDTH * 3 + 7, per_append=13)
    await settle(tree_db)
    old = await take_digest(tree_db, ring)
    await append(journal, 100, per_append=13)
    await settle(tree_db)
    out = tmp_path / "tiles"
    exported = await run_cli(
        "ledger", "tiles", "export", str(out), database_url=tree_url, env=kek_env()
    )
    assert exported.code == 0, exported.stderr
    digest_path = out / "digest.json"
    from ledger.audit.verifier import Digest

    digest = Digest.from_json(digest_path.read_text())
    assert digest.tree_size == len(await all_events(journal)) > TILE_WIDTH * 3 + 100
    paths = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    want = sorted([tile_path(*t) for t in tiles_of(digest.tree_size)] + ["digest.json"])
    assert paths == want and "tile/1/000.p/3" in paths
    assert f"tile/0/003.p/{digest.tree_size - 3 * TILE_WIDTH}" in paths
    keys_file = tmp_path / "keys.json"
    public = await run_cli("keys", "export-public", database_url=tree_url, env=kek_env())
    keys_file.write_text(public.stdout)
    (tmp_path / "old.json").write_text(old.to_json())
    events = await all_events(journal)
    proof = await prove_inclusion(tree_db, events[300].position, digest)
    (tmp_path / "proof.json").write_text(proof.to_json())
    good = await run_verifier(
        "tiles",
        out,
        "--public-keys",
        keys_file,
        "--inclusion",
        tmp_path / "proof.json",
        "--old",
        tmp_path / "old.json",
    )
    assert good.code == 0, good.stdout + good.stderr
    tile = out / "tile/0/001"
    hashes = bytearray(tile.read_bytes())
    hashes[0] ^= 1
    tile.write_bytes(bytes(hashes))
    bad = await run_verifier("tiles", out, "--public-keys", keys_file)
    assert bad.code == 1 and "tile/0/001" in bad.stdout


async def test_serve_integrates_in_the_background(tree_url: str, tree_db: Database) -> None:
    await KeyRing.open(tree_db, LocalKek(TEST_KEK), reviewer_kek=LocalKek(TEST_REVIEWER_KEK))
    await token_for(tree_db, "ops")
    journal = Journal(tree_db)
    await append(journal, 30)
    await settle(tree_db)
    async with temporary_login(tree_url, "signoff_reviewer") as url:
        settings = Settings(
            database_url=url,
            kek=LocalKek(TEST_KEK),
            reviewer_kek=LocalKek(TEST_REVIEWER_KEK),
            tree_integrate_seconds=0.05,
        )
        service = await open_service(settings, pool_size=3)
        try:
            for _ in range(200):
                async with tree_db.connection() as conn:
                    if (await read_state(conn)).size >= 30:
                        break
                await asyncio.sleep(0.05)
        finally:
            await service.close()
    async with tree_db.connection() as conn:
        assert (await read_state(conn)).size >= 30
    assert Settings.from_env({"SIGNOFF_TREE_INTEGRATE_SECONDS": "0"}).tree_integrate_seconds == 0
