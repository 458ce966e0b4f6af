"""Signed digests and proofs: they commit to the journal, survive concurrent writers, catch
tampering, and check out offline with nothing but the exported public keys."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import importlib.util
import json
import os
import random
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from ledger import VersionConflict
from ledger.audit.digest import (
    Digest,
    DigestMismatch,
    NotInDigest,
    export_event,
    prove_consistency,
    prove_inclusion,
    signing_keys,
    take_digest,
    verify_digest,
)
from ledger.audit.merkle import MerkleTree
from ledger.audit.verifier import (
    ExportedEvent,
    Invalid,
    check_consistency,
    check_digest,
    check_inclusion,
    digest_message,
)
from ledger.canonical import GENESIS_HASH, chain_hash, event_bytes
from ledger.journal import Event, Journal, NewEvent
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from tests.support.scratch import scratch_database

from .support.processes import ROOT, TEST_KEK, CliResult, kek_env, run_cli


def no_kek_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("SIGNOFF_KEK", "SIGNOFF_KEK_FILE")}


@pytest.fixture(scope="module")
async def audit_url(server_url: str) -> AsyncIterator[str]:
    """A database of this module's own: the session database's keys may be wrapped by another
    module's KEK, and the CLI processes need ours."""
    async with scratch_database(server_url, prefix="signoff_test") as url:
        yield url


@pytest.fixture(scope="module")
async def audit_db(audit_url: str) -> AsyncIterator[Database]:
    async with await Database.connect(audit_url) as db:
        yield db


@pytest.fixture(scope="module")
async def ring(audit_db: Database) -> KeyRing:
    return await KeyRing.open(audit_db, LocalKek(TEST_KEK))


async def fill(journal: Journal, streams: int = 3, versions: int = 4) -> list[str]:
    names = [f"audit:{uuid.uuid4().hex}" for _ in range(streams)]
    for version in range(versions):
        for name in names:
            data = {"n": version, "amount": 120 + version}
            await journal.append(
                name, [NewEvent("audit.happened", data, actor="tester")], expected_version=version
            )
    return names


_UNSETTLED = """
SELECT EXISTS (SELECT FROM events WHERE txid >= pg_snapshot_xmin(pg_current_snapshot()))
"""


async def settle(db: Database, within: float = 60) -> None:
    """Wait until every committed event is below the horizon. The horizon is cluster-wide, so
    other tests' open transactions on the same server can hold it back for a moment."""
    deadline = time.monotonic() + within
    async with db.connection() as conn:
        while await conn.fetchval(_UNSETTLED):
            if time.monotonic() > deadline:
                raise AssertionError(f"a transaction held the horizon back for {within} s")
            await asyncio.sleep(0.05)


async def all_events(journal: Journal) -> list[Event]:
    return [e async for e in journal.read_all()]


async def run_verifier(*args: str | Path) -> CliResult:
    """`python -m ledger.audit.verifier ARGS...` in its own process, with no database configured."""
    env = {k: v for k, v in no_kek_env().items() if not k.endswith("DATABASE_URL")}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "ledger.audit.verifier",
        *map(str, args),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**env, "PYTHONPATH": str(ROOT)},
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return CliResult(process.returncode, stdout.decode(), stderr.decode())


async def cli(url: str, *args: str | int | Path) -> CliResult:
    return await run_cli(*map(str, args), database_url=url, env=kek_env())


async def cli_ok(url: str, *args: str | int | Path) -> CliResult:
    result = await cli(url, *args)
    assert result.code == 0, result.stdout + result.stderr
    return result


def edit_json(path: Path, out: Path, change: Callable[[Any], None]) -> Path:
    """Copy the JSON document at `path` to `out`, changed by `change(doc)`."""
    doc = json.loads(path.read_text())
    change(doc)
    out.write_text(json.dumps(doc))
    return out


def put(*where: str | int, to: Any) -> Callable[[Any], None]:
    """A change for `edit_json`: set doc[where[0]][where[1]]... to `to`, or to `to(old value)`
    when `to` is callable."""

    def change(doc: Any) -> None:
        for key in where[:-1]:
            doc = doc[key]
        doc[where[-1]] = to(doc[where[-1]]) if callable(to) else to

    return change


def flip_hex(text: str) -> str:
    return ("0" if text[0] != "0" else "1") + text[1:]


async def as_superuser(url: str, *statements: tuple[str, tuple[Any, ...]]) -> None:
    """Run statements with the append-only guard switched off, as an attacker with superuser
    rights would."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
        for sql, params in statements:
            await conn.execute(sql, *params)
        await conn.execute("ALTER TABLE events ENABLE TRIGGER events_append_only")
    finally:
        await conn.close()


CHANGE_A_BYTE = "UPDATE events SET data = replace(data::text, '2', '7')::json WHERE position = $1"


# -- the digest ----------------------------------------------------------------------------------


async def test_digest_commits_to_every_event_in_the_global_order(
    audit_db: Database, ring: KeyRing
) -> None:
    journal = Journal(audit_db)
    await fill(journal)
    await settle(audit_db)
    digest = await take_digest(audit_db, ring)
    events = await all_events(journal)
    assert digest.tree_size == len(events) > 12
    assert digest.root == MerkleTree.from_data(e.hash for e in events).root()
    assert digest.last_position == events[-1].position
    assert Digest.from_json(digest.to_json()) == digest
    check_digest(digest, signing_keys(ring))
    check = await verify_digest(audit_db, digest, signing_keys(ring))
    assert check.ok and check.leaves_found == digest.tree_size, check.problems

    # The export carries what an auditor needs to recompute every event's chain hash.
    previous: dict[str, bytes] = {}
    for event in sorted(events, key=lambda e: (e.stream_id, e.version)):
        exported = export_event(event, previous.get(event.stream_id, GENESIS_HASH))
        assert ExportedEvent.from_dict(json.loads(json.dumps(exported.to_dict()))) == exported
        assert exported.recomputed_hash() == event.hash
        assert exported.data == event.data_json
        previous[event.stream_id] = event.hash


async def test_the_signature_covers_every_field_of_the_digest(
    audit_db: Database, ring: KeyRing
) -> None:
    digest = await take_digest(audit_db, ring)
    keys = signing_keys(ring)
    altered = [
        dataclasses.replace(digest, tree_size=digest.tree_size - 1),
        dataclasses.replace(digest, root=bytes(32)),
        dataclasses.replace(digest, last_position=digest.last_position + 1),
        dataclasses.replace(digest, taken_at=digest.taken_at + timedelta(microseconds=1)),
        dataclasses.replace(digest, signature=bytes(64)),
    ]
    for forged in altered:
        with pytest.raises(Invalid, match="does not verify"):
            check_digest(forged, keys)
    with pytest.raises(Invalid, match="not among the public keys"):
        check_digest(dataclasses.replace(digest, key_id="sig-0000"), keys)
    other = await take_digest(audit_db, ring)
    with pytest.raises(Invalid, match="does not verify"):
        check_digest(dataclasses.replace(digest, signature=other.signature), keys)
    check = await verify_digest(audit_db, altered[0], keys)
    assert not check.ok and "signature" in check.problems[0]


async def test_a_digest_never_covers_an_event_behind_an_open_transaction(
    fresh_database_url: str,
) -> None:
    async with await Database.connect(fresh_database_url) as db:
        ring = await KeyRing.open(db, LocalKek(TEST_KEK))
        journal = Journal(db)
        await fill(journal, streams=2, versions=2)
        await settle(db)
        before = len(await all_events(journal))
        # A transaction takes a position and stays open; a later one commits a higher position.
        slow = await asyncpg.connect(fresh_database_url)
        try:
            transaction = slow.transaction()
            await transaction.start()
            late = (
                await journal.append(
                    "audit:late", [NewEvent("audit.late", {}, actor="slow")], 0, connection=slow
                )
                if False
                else await journal.append(
                    "audit:late",
                    [NewEvent("audit.late", {}, actor="slow")],
                    expected_version=0,
                    connection=slow,
                )
            )
            early = await journal.append(
                "audit:early", [NewEvent("audit.early", {}, actor="quick")], expected_version=0
            )
            assert late.positions[0] < early.positions[0]
            first = await take_digest(db, ring)
            assert first.tree_size == before, "the digest stops at the open transaction"
            assert first.last_position < late.positions[0]
            await transaction.commit()
        finally:
            await slow.close()
        await settle(db)
        second = await take_digest(db, ring)
        assert second.tree_size == before + 2
        proof = await prove_consistency(db, first, second)
        check_consistency(first, second, proof, signing_keys(ring))
        for position in (late.positions[0], early.positions[0]):
            inclusion = await prove_inclusion(db, position, second)
            check_inclusion(second, inclusion, signing_keys(ring))
            with pytest.raises(NotInDigest):
                await prove_inclusion(db, position, first)


# -- inclusion proofs, offline -------------------------------------------------------------------


async def test_inclusion_proofs_verify_offline_and_every_alteration_fails(
    audit_url: str, audit_db: Database, tmp_path: Path
) -> None:
    journal = Journal(audit_db)
    await fill(journal)
    await settle(audit_db)
    digest, keys = tmp_path / "digest.json", tmp_path / "keys.json"
    await cli_ok(audit_url, "ledger", "digest", "--out", digest)
    await cli_ok(audit_url, "keys", "export-public", "--out", keys)
    tree_size = json.loads(digest.read_text())["tree_size"]
    events = (await all_events(journal))[:tree_size]
    assert (await run_verifier("digest", digest, "--public-keys", keys)).code == 0

    chosen = [events[0], events[len(events) // 2], events[-1]]
    for event in chosen:
        proof = tmp_path / f"proof-{event.position}.json"
        await cli_ok(
            audit_url, "ledger", "prove", event.position, "--digest", digest, "--out", proof
        )
        result = await run_verifier("inclusion", digest, proof, "--public-keys", keys)
        assert result.code == 0, result.stdout + result.stderr
        assert f"version {event.version}" in result.stdout
    printed = await cli_ok(audit_url, "ledger", "prove", chosen[1].position, "--digest", digest)
    assert json.loads(printed.stdout)["event"]["position"] == chosen[1].position

    proof = tmp_path / f"proof-{chosen[1].position}.json"

    def refit(doc: dict[str, Any]) -> None:
        """Change the event's payload and make its hash fit it again."""
        fields = ExportedEvent.from_dict(doc["event"])
        fields = dataclasses.replace(fields, data='{"amount":1,"n":1}')
        doc["event"]["data"] = fields.data
        doc["event"]["hash"] = fields.recomputed_hash().hex()

    def other_key(doc: dict[str, Any]) -> None:
        doc["keys"] = [
            {**k, "public_key": base64.b64encode(os.urandom(32)).decode()} for k in doc["keys"]
        ]

    cases: dict[str, tuple[Path, Path, Path, str]] = {}
    for name, change, expected in [
        ("path", put("audit_path", 0, to=flip_hex), "path"),
        ("actor", put("event", "actor", to="mallory"), "altered"),
        ("data", put("event", "data", to='{"amount":1,"n":1}'), "altered"),
        ("refitted", refit, "audit path"),
        ("index", put("leaf_index", to=lambda i: i + 1), "audit path"),
        ("time", put("event", "recorded_at", to="2020-01-01T00:00:00Z"), "time"),
    ]:
        cases[name] = (digest, edit_json(proof, tmp_path / f"{name}.json", change), keys, expected)
    for name, change, expected in [
        (
            "signature",
            put("signature", to=base64.b64encode(bytes(64)).decode()),
            "signature",
        ),
        ("root", put("root", to=flip_hex), "signature"),
    ]:
        cases[name] = (
            edit_json(digest, tmp_path / f"d-{name}.json", change),
            proof,
            keys,
            expected,
        )
    cases["key"] = (digest, proof, edit_json(keys, tmp_path / "k.json", other_key), "signature")
    for name, (digest_file, proof_file, keys_file, expected) in cases.items():
        result = await run_verifier(
            "inclusion", digest_file, proof_file, "--public-keys", keys_file
        )
        assert result.code == 1, f"{name}: {result.stdout}{result.stderr}"
        assert result.stdout.startswith("INVALID") and expected in result.stdout, name

    # Usage errors: unreadable or malformed keys, missing arguments.
    assert (await run_verifier("inclusion", digest, proof, "--public-keys", tmp_path)).code == 2
    assert (await run_verifier("inclusion", digest, proof, "--public-keys", proof)).code == 2
    assert (await run_verifier("inclusion", digest, "--public-keys", keys)).code == 2
    missing = await run_verifier("digest", tmp_path / "nope.json", "--public-keys", keys)
    assert missing.code == 2 and "cannot read" in missing.stderr

    # Auditors verify the database against the digest without the KEK.
    verified = await run_cli(
        "ledger",
        "verify",
        "--digest",
        str(digest),
        "--public-keys",
        str(keys),
        "--json",
        database_url=audit_url,
        env=no_kek_env(),
    )
    assert verified.code == 0, verified.stdout + verified.stderr
    assert json.loads(verified.stdout)["digest"]["ok"]


async def test_prove_refuses_positions_outside_the_digest(
    audit_url: str, audit_db: Database, ring: KeyRing, tmp_path: Path
) -> None:
    journal = Journal(audit_db)
    digest = await take_digest(audit_db, ring)
    later = await journal.append(
        f"audit:{uuid.uuid4().hex}", [NewEvent("audit.later", {}, actor="t")], expected_version=0
    )
    for position in (later.positions[0], 0, 10**9):
        with pytest.raises(NotInDigest):
            await prove_inclusion(audit_db, position, digest)
    path = tmp_path / "digest.json"
    path.write_text(digest.to_json())
    result = await cli(audit_url, "ledger", "prove", later.positions[0], "--digest", path)
    assert result.code == 2 and "among the" in result.stderr
    path.write_text("{}")
    result = await cli(audit_url, "ledger", "prove", "1", "--digest", path)
    assert result.code == 2 and "not a Signoff digest" in result.stderr


# -- tampering -----------------------------------------------------------------------------------


async def test_a_changed_payload_fails_verify_digest_and_its_proof(
    fresh_database_url: str, tmp_path: Path
) -> None:
    url = fresh_database_url
    async with await Database.connect(url) as db:
        journal = Journal(db)
        await KeyRing.open(db, LocalKek(TEST_KEK))
        streams = await fill(journal)
        target = (await journal.read_stream(streams[1]))[2]
        await settle(db)
    digest, keys, proof = tmp_path / "d.json", tmp_path / "k.json", tmp_path / "p.json"
    await cli_ok(url, "ledger", "digest", "--out", digest)
    await cli_ok(url, "keys", "export-public", "--out", keys)
    await cli_ok(url, "ledger", "prove", target.position, "--digest", digest, "--out", proof)
    await cli_ok(url, "ledger", "verify", "--digest", digest)

    await as_superuser(url, (CHANGE_A_BYTE, (target.position,)))

    result = await cli(url, "ledger", "verify", "--digest", digest, "--json")
    assert result.code == 1, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert not report["ok"]
    assert [(b["stream_id"], b["version"], b["position"]) for b in report["bad"]] == [
        (streams[1], 3, target.position)
    ]
    text = await cli(url, "ledger", "verify", "--digest", digest)
    assert text.code == 1 and f"position {target.position}" in text.stdout

    # The stored hashes still fit the digest, so a proof can be made; the event's content
    # no longer fits its hash, and the offline verifier says so.
    reproven = tmp_path / "reproven.json"
    await cli_ok(url, "ledger", "prove", target.position, "--digest", digest, "--out", reproven)
    result = await run_verifier("inclusion", digest, reproven, "--public-keys", keys)
    assert result.code == 1 and "the event was altered" in result.stdout
    # The proof taken before, shown with the event as the database now exports it.
    changed = json.loads(reproven.read_text())["event"]
    stale = edit_json(proof, tmp_path / "stale.json", put("event", to=changed))
    result = await run_verifier("inclusion", digest, stale, "--public-keys", keys)
    assert result.code == 1 and "altered" in result.stdout


async def test_rewritten_hashes_pass_the_chain_check_but_not_the_digest(
    fresh_database_url: str, tmp_path: Path
) -> None:
    url = fresh_database_url
    async with await Database.connect(url) as db:
        journal = Journal(db)
        ring = await KeyRing.open(db, LocalKek(TEST_KEK))
        streams = await fill(journal)
        await settle(db)
        digest = await take_digest(db, ring)
        stream = await journal.read_stream(streams[0])
        target = stream[1]
        proof = await prove_inclusion(db, target.position, digest)
        # A careful attacker changes an event and recomputes its stream's chain after it.
        statements: list[tuple[str, tuple[Any, ...]]] = []
        previous = stream[0].hash
        forged_event = None
        for event in stream[1:]:
            data = '{"amount":9999,"n":1}' if event is target else event.data_json
            canonical = event_bytes(
                event.stream_id,
                event.version,
                event.type,
                event.actor,
                event.recorded_at,
                data,
                tag_version=event.tag_version,
                login=event.login,
            )
            previous = chain_hash(previous, canonical)
            statements.append(
                (
                    "UPDATE events SET data = $1::json, hash = $2 WHERE position = $3",
                    (data, previous, event.position),
                )
            )
            if event is target:
                forged_event = export_event(
                    dataclasses.replace(event, data_json=data, hash=previous), stream[0].hash
                )
        await as_superuser(url, *statements)
        assert (await journal.verify()).ok, "the chain alone no longer shows the change"
        check = await verify_digest(db, digest, signing_keys(ring))
        assert not check.ok and "hash to root" in check.problems[0]
        with pytest.raises(DigestMismatch):
            await prove_inclusion(db, target.position, digest)

    digest_file, keys = tmp_path / "d.json", tmp_path / "k.json"
    digest_file.write_text(digest.to_json())
    await cli_ok(url, "keys", "export-public", "--out", keys)
    result = await cli(url, "ledger", "verify", "--digest", digest_file)
    assert result.code == 1 and "digest DOES NOT MATCH" in result.stdout, result.stdout
    result = await cli(url, "ledger", "prove", target.position, "--digest", digest_file)
    assert result.code == 1 and "TAMPERED" in result.stderr

    assert forged_event is not None
    forged_event.recomputed_hash()  # the forgery is self-consistent...
    forged = tmp_path / "forged.json"
    forged.write_text(dataclasses.replace(proof, event=forged_event).to_json())
    result = await run_verifier("inclusion", digest_file, forged, "--public-keys", keys)
    assert result.code == 1 and "audit path" in result.stdout  # ...but not in the digest


async def test_deleted_events_break_the_digest(fresh_database_url: str) -> None:
    async with await Database.connect(fresh_database_url) as db:
        journal = Journal(db)
        ring = await KeyRing.open(db, LocalKek(TEST_KEK))
        await fill(journal)
        await settle(db)
        digest = await take_digest(db, ring)
        events = await all_events(journal)
        await fill(journal, streams=1, versions=1)  # one more event after the digest
        await as_superuser(
            fresh_database_url, ("DELETE FROM events WHERE position = $1", (events[3].position,))
        )
        check = await verify_digest(db, digest, signing_keys(ring))
        assert not check.ok and "hash to root" in check.problems[0]
        await as_superuser(
            fresh_database_url,
            ("DELETE FROM events WHERE position > $1", (events[-3].position,)),
        )
        check = await verify_digest(db, digest, signing_keys(ring))
        assert not check.ok and "were deleted" in check.problems[0]


# -- consistency ---------------------------------------------------------------------------------


async def append_concurrently(url: str, writers: int, each: int) -> None:
    """`writers` connections appending to shared streams, each holding its transaction open a
    few milliseconds so commits land out of position order."""
    async with await Database.connect(url, pool_size=writers) as db:
        journal = Journal(db)

        async def writer(worker: int) -> None:
            rng = random.Random(worker)
            done = 0
            while done < each:
                stream = f"shared:{rng.randrange(3)}"
                version = await journal.stream_version(stream)
                try:
                    async with db.transaction() as conn:
                        await journal.append(
                            stream,
                            [NewEvent("audit.shared", {"worker": worker}, actor=f"w{worker}")],
                            expected_version=version,
                            connection=conn,
                        )
                        await asyncio.sleep(rng.random() * 0.005)
                except VersionConflict:  # a lost race: try again at the new version
                    continue
                done += 1

        await asyncio.gather(*(writer(w) for w in range(writers)))


async def test_a_later_digest_provably_extends_an_earlier_one(
    audit_url: str, audit_db: Database, ring: KeyRing, tmp_path: Path
) -> None:
    await fill(Journal(audit_db), streams=2, versions=2)
    old, new, keys, proof = (tmp_path / f"{n}.json" for n in ("old", "new", "keys", "proof"))
    await settle(audit_db)
    await cli_ok(audit_url, "ledger", "digest", "--out", old)
    await append_concurrently(audit_url, writers=8, each=10)
    await settle(audit_db)
    await cli_ok(audit_url, "ledger", "digest", "--out", new)
    await cli_ok(audit_url, "keys", "export-public", "--out", keys)
    old_size = json.loads(old.read_text())["tree_size"]
    assert json.loads(new.read_text())["tree_size"] >= old_size + 80

    await cli_ok(audit_url, "ledger", "consistency", old, new, "--out", proof)
    result = await run_verifier("consistency", old, new, proof, "--public-keys", keys)
    assert result.code == 0, result.stdout + result.stderr
    same = tmp_path / "same.json"
    await cli_ok(audit_url, "ledger", "consistency", new, new, "--out", same)
    assert (await run_verifier("consistency", new, new, same, "--public-keys", keys)).code == 0

    # A "new" digest over another history, honestly signed: the proof cannot tie them.
    real = Digest.from_json(new.read_text())
    fork_root = MerkleTree.from_data(os.urandom(32) for _ in range(real.tree_size)).root()
    signed_by, signature = ring.sign(
        digest_message(real.tree_size, fork_root, real.last_position, real.taken_at, real.key_id)
    )
    assert signed_by == real.key_id
    fork = tmp_path / "fork.json"
    fork.write_text(dataclasses.replace(real, root=fork_root, signature=signature).to_json())
    result = await run_verifier("consistency", old, fork, proof, "--public-keys", keys)
    assert result.code == 1 and "does not match the new digest" in result.stdout
    fork_proof = edit_json(proof, tmp_path / "fork-proof.json", put("new_root", to=fork_root.hex()))
    result = await run_verifier("consistency", old, fork, fork_proof, "--public-keys", keys)
    assert result.code == 1 and "does not extend" in result.stdout
    result = await cli(audit_url, "ledger", "consistency", old, fork)
    assert result.code == 1 and "TAMPERED" in result.stderr

    # A forged root without a fitting signature, and a tampered proof.
    unsigned = edit_json(new, tmp_path / "unsigned.json", put("root", to=flip_hex))
    result = await run_verifier("consistency", old, unsigned, proof, "--public-keys", keys)
    assert result.code == 1 and "new digest" in result.stdout and "signature" in result.stdout
    bent = edit_json(proof, tmp_path / "bent.json", put("proof", 0, to=flip_hex))
    result = await run_verifier("consistency", old, new, bent, "--public-keys", keys)
    assert result.code == 1 and "does not extend" in result.stdout

    # The older digest must come first.
    result = await cli(audit_url, "ledger", "consistency", new, old)
    assert result.code == 2 and "older digest first" in result.stderr


# -- the verifier stands alone -------------------------------------------------------------------


# What the auditor's machine has: the standard library and `cryptography` (with the cffi it may
# load), nothing else. `-I -S` drops PYTHONPATH, the user site and site-packages.
_ISOLATED = """
import importlib.util, runpy, sys
sys.path.insert(0, sys.argv[1])
heavy = ("asyncpg", "sqlalchemy", "structlog", "alembic")
absent = [m for m in heavy if importlib.util.find_spec(m)]
if absent:
    sys.exit(f"not isolated: {absent} importable")
sys.argv = ["verifier", *sys.argv[2:]]
runpy.run_module("ledger.audit.verifier", run_name="__main__", alter_sys=True)
"""


def only_cryptography(folder: Path) -> Path:
    """A folder holding links to `cryptography`, cffi and the repository's `ledger` package."""
    folder.mkdir()
    (folder / "ledger").symlink_to(ROOT / "ledger", target_is_directory=True)
    for name in ("cryptography", "cffi", "_cffi_backend"):
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            assert name != "cryptography", "cryptography is not installed"
            continue
        origin = Path(spec.origin)
        source = origin.parent if spec.submodule_search_locations else origin
        (folder / source.name).symlink_to(source)
    return folder


async def run_isolated_verifier(lib: Path, *args: str | Path) -> CliResult:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-I",
        "-S",
        "-c",
        _ISOLATED,
        str(lib),
        *map(str, args),
        cwd=lib,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={"PATH": os.environ.get("PATH", "")},
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode is not None
    return CliResult(process.returncode, stdout.decode(), stderr.decode())


async def test_the_verifier_runs_with_only_the_standard_library_and_cryptography(
    audit_url: str, audit_db: Database, tmp_path: Path
) -> None:
    await fill(Journal(audit_db), streams=2, versions=2)
    old, new, keys = (tmp_path / f"{n}.json" for n in ("old", "new", "keys"))
    inclusion, consistency = tmp_path / "inclusion.json", tmp_path / "consistency.json"
    await settle(audit_db)
    await cli_ok(audit_url, "ledger", "digest", "--out", old)
    await fill(Journal(audit_db), streams=2, versions=2)
    await settle(audit_db)
    await cli_ok(audit_url, "ledger", "digest", "--out", new)
    await cli_ok(audit_url, "keys", "export-public", "--out", keys)
    position = (await all_events(Journal(audit_db)))[-1].position
    await cli_ok(audit_url, "ledger", "prove", position, "--digest", new, "--out", inclusion)
    await cli_ok(audit_url, "ledger", "consistency", old, new, "--out", consistency)
    lib = only_cryptography(tmp_path / "lib")

    for args in (
        ("digest", new, "--public-keys", keys),
        ("inclusion", new, inclusion, "--public-keys", keys),
        ("consistency", old, new, consistency, "--public-keys", keys),
    ):
        result = await run_isolated_verifier(lib, *args)
        assert result.code == 0, f"{args[0]}: {result.stdout}{result.stderr}"
    # It checks, too: an altered event fails there as well.
    forged = edit_json(inclusion, tmp_path / "forged.json", put("event", "actor", to="mallory"))
    result = await run_isolated_verifier(lib, "inclusion", new, forged, "--public-keys", keys)
    assert result.code == 1, result.stdout + result.stderr
