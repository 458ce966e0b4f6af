"""Witnesses of the journal's checkpoints, each `signoff` command in its own process: a witness
cosigns only checkpoints the log signed that extend what it cosigned, refuses the others with
its state unchanged, and `ledger verify` requires N of M witnesses."""

from __future__ import annotations

import asyncio
import json
import os
import stat
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ledger.audit.checkpoint import ED25519, Checkpoint, SignedNote, SignerKey, sign_checkpoint
from ledger.audit.verifier import Digest
from ledger.journal import Journal
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.logins import temporary_login
from ledger.store.settings import Settings
from tests.support.scratch import scratch_database

from .support.processes import TEST_KEK, CliResult, kek_env, run_cli
from .test_digest import fill, run_verifier, settle

ORIGIN = "example.com/signoff/witnessed"


@dataclass
class Log:
    url: str
    db: Database
    ring: KeyRing
    folder: Path

    async def cli(self, *args: str | Path, url: str | None = None) -> CliResult:
        env = {**kek_env(), "SIGNOFF_LOG_ORIGIN": ORIGIN}
        return await run_cli(*map(str, args), database_url=url or self.url, env=env)

    async def ok(self, *args: str | Path, url: str | None = None) -> CliResult:
        result = await self.cli(*args, url=url)
        assert result.code == 0, result.stdout + result.stderr
        return result

    async def digest(self, name: str) -> Path:
        """More events, then a digest of them all in `name`."""
        await fill(Journal(self.db), streams=2, versions=2)
        await settle(self.db)
        path = self.folder / name
        await self.ok("ledger", "digest", "--out", path)
        return path


@pytest.fixture(scope="module")
async def log(server_url: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Log]:
    async with scratch_database(server_url, prefix="signoff_test") as url:
        settings = Settings(database_url=url, kek=LocalKek(TEST_KEK), log_origin=ORIGIN)
        async with await Database.from_settings(settings) as db:
            ring = await KeyRing.open(db, LocalKek(TEST_KEK))
            yield Log(url, db, ring, tmp_path_factory.mktemp("witness"))


async def log_vkey(log: Log) -> str:
    keys = log.folder / "keys.json"
    if not keys.exists():
        await log.ok("keys", "export-public", "--out", keys)
    offline = (await log.ok("ledger", "vkey", "--public-keys", keys)).stdout.split()
    assert offline == (await log.ok("ledger", "vkey")).stdout.split()  # the journal's records
    [vkey] = offline
    assert vkey.startswith(f"{ORIGIN}+")
    return vkey


async def witness(log: Log, name: str) -> tuple[Path, str]:
    key = log.folder / f"{name}.key"
    result = await log.ok("ledger", "witness", "init", "--key", key, "--name", f"w.example/{name}")
    vkey = result.stdout.strip()
    assert vkey.startswith(f"w.example/{name}+")
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert (await log.ok("ledger", "witness", "vkey", "--key", key)).stdout.strip() == vkey
    return key, vkey


def checkpoint_of(path: Path) -> str:
    note = Digest.from_json(path.read_text()).checkpoint
    assert note is not None
    return note


def forge(log: Log, size: int, root: bytes) -> str:
    """A checkpoint the log's own key signs (as a log that lies would), of any tree."""
    _, public = log.ring.public_key()
    return sign_checkpoint(Checkpoint(ORIGIN, size, root), public, lambda m: log.ring.sign(m)[1])


async def test_a_witness_cosigns_only_what_extends_what_it_cosigned(log: Log) -> None:
    vkey = await log_vkey(log)
    key, _ = await witness(log, "solo")
    again = await log.cli("ledger", "witness", "init", "--key", key, "--name", "w.example/x")
    assert again.code == 2 and "exists" in again.stderr
    state = log.folder / "solo.state"

    async def cosign(*args: str | Path) -> CliResult:
        base = ("ledger", "witness", "cosign", "--key", key, "--state", state, "--log-key", vkey)
        return await log.cli(*base, *args)

    async def refused(because: str, *args: str | Path) -> None:
        before = state.read_bytes()
        result = await cosign(*args)
        assert result.code == 1, result.stdout + result.stderr
        [line] = result.stderr.splitlines()
        assert line.startswith("refused: ") and because in line, line
        assert state.read_bytes() == before  # the state stays as it was
        assert not [p for p in log.folder.iterdir() if p.name.endswith(".tmp")]

    first = await log.digest("first.json")
    checkpoint = log.folder / "first.txt"
    await log.ok("ledger", "digest", "--out", log.folder / "again.json", "--checkpoint", checkpoint)
    assert SignedNote.parse(checkpoint.read_text()).text.startswith(f"{ORIGIN}\n")
    # The first checkpoint needs no proof: the empty tree extends to any.
    result = await cosign("--digest", first, "--out", log.folder / "first-w.json")
    assert result.code == 0, result.stderr
    cosigned = Digest.from_json((log.folder / "first-w.json").read_text())
    assert cosigned.tree_size == Digest.from_json(first.read_text()).tree_size
    assert json.loads(state.read_text())["tree_size"] == cosigned.tree_size

    second = await log.digest("second.json")
    await refused("consistency proof", "--digest", second)
    proof = log.folder / "first-second.json"
    await log.ok("ledger", "consistency", first, second, "--out", proof)
    ok = await cosign("--digest", second, "--proof", proof, "--out", log.folder / "second-w.json")
    assert ok.code == 0, ok.stderr
    await refused("is smaller than", "--digest", first)  # rolled back
    size = Digest.from_json(second.read_text()).tree_size
    assert json.loads(state.read_text())["tree_size"] == size
    # The same checkpoint again is still consistent: cosigned again.
    assert (await cosign("--digest", second)).code == 0

    third = await log.digest("third.json")
    await refused("the proof starts from", "--digest", third, "--proof", proof)
    forged = log.folder / "forged.txt"
    forged.write_text(forge(log, size, bytes(32)))  # the same size, another root: a fork
    await refused("forked", "--checkpoint", forged, "--from-database")
    bigger = Digest.from_json(third.read_text()).tree_size
    forged.write_text(forge(log, bigger, bytes(32)))  # a larger tree that is not the journal's
    await refused("no consistency proof", "--checkpoint", forged, "--from-database")
    altered = checkpoint_of(third).replace(f"\n{bigger}\n", f"\n{bigger + 1}\n")
    forged.write_text(altered)
    await refused("does not verify", "--checkpoint", forged, "--from-database")
    other_log = "example.com/other+00000000+" + vkey.split("+", 2)[2]
    base = ("ledger", "witness", "cosign", "--key", key, "--state", state)
    result = await log.cli(*base, "--log-key", other_log, "--digest", third)
    assert result.code == 2 and "--log-key" in result.stderr  # a malformed vkey: usage
    stranger = SignerKey.generate(ORIGIN, ED25519).verifier.vkey  # the origin, another key
    before = state.read_bytes()
    result = await log.cli(*base, "--log-key", stranger, "--digest", third, "--from-database")
    assert result.code == 1 and "no signature of a key" in result.stderr
    assert state.read_bytes() == before

    # The proof from the database, on the service's login: no KEK, no private key.
    async with temporary_login(log.url, "signoff_reviewer") as reviewer:
        env = {k: v for k, v in kek_env().items() if not k.startswith("SIGNOFF_KEK")}
        args = (*base, "--log-key", vkey, "--digest", third, "--from-database")
        result = await run_cli(*map(str, args), database_url=reviewer, env=env)
    assert result.code == 0, result.stderr
    cosigned_third = SignedNote.parse(Digest.from_json(result.stdout).checkpoint or "")
    assert len(cosigned_third.signatures) == 2
    assert json.loads(state.read_text())["tree_size"] == bigger


async def test_verify_requires_n_of_m_witnesses(log: Log) -> None:
    vkey = await log_vkey(log)
    witnesses = [await witness(log, f"w{i}") for i in range(3)]
    digest = await log.digest("nm.json")
    document = digest
    for i, (key, _) in enumerate(witnesses[:2]):  # two of the three cosign, one after the other
        out = log.folder / f"nm-{i}.json"
        await log.ok(
            "ledger", "witness", "cosign", "--key", key, "--state", log.folder / f"nm-{i}.state",
            "--log-key", vkey, "--digest", document, "--out", out,
        )  # fmt: skip
        document = out
    keys = log.folder / "keys.json"
    trusted = [arg for _, v in witnesses for arg in ("--witness-key", v)]

    async def verify(path: Path, *args: str) -> CliResult:
        cli: list[str | Path] = ["ledger", "verify", "--digest", path, "--public-keys", keys]
        return await log.cli(*cli, *trusted, *args)

    result = await verify(document, "--witnesses", "2")
    assert result.code == 0, result.stdout + result.stderr
    assert "2 valid cosignature(s) of 2 required" in result.stdout
    short = await verify(document)  # all three by default
    assert short.code == 1
    assert "2 valid witness cosignature(s) of 3 required" in short.stdout
    assert (await verify(digest, "--witnesses", "1")).code == 1  # not cosigned at all
    # A witness's line made invalid is not counted (nor is the note rejected for it).
    doc = json.loads(document.read_text())
    lines = doc["checkpoint"].split("\n")
    lines[-2] = lines[-2][:-6] + ("AAAA==" if not lines[-2].endswith("AAAA==") else "BBBB==")
    doc["checkpoint"] = "\n".join(lines)
    broken = log.folder / "nm-broken.json"
    broken.write_text(json.dumps(doc))
    assert (
        "1 valid witness cosignature(s) of 2 required"
        in (await verify(broken, "--witnesses", "2")).stdout
    )
    impossible = await verify(document, "--witnesses", "4")
    assert impossible.code == 2 and "cannot be met" in impossible.stderr

    # The offline verifier, with no database and no KEK, counts the same.
    offline: list[str | Path] = ["digest", document, "--public-keys", keys, *trusted]
    assert (await run_verifier(*offline, "--witnesses", "2")).code == 0
    counted = await run_verifier(*offline)
    assert counted.code == 1 and "2 valid witness cosignature(s) of 3 required" in counted.stdout
    assert (
        await run_verifier("digest", broken, "--public-keys", keys, *trusted, "--witnesses", "2")
    ).code == 1


async def test_concurrent_cosigners_never_roll_the_state_back(log: Log) -> None:
    """Many processes cosign an older and a newer checkpoint at once, on one state: whatever
    the order, the state ends at the newer one (the lock makes check and update one step)."""
    vkey = await log_vkey(log)
    key, _ = await witness(log, "racer")
    state = log.folder / "racer.state"
    old = await log.digest("race-old.json")
    new = await log.digest("race-new.json")
    proof = log.folder / "race-proof.json"
    await log.ok("ledger", "consistency", old, new, "--out", proof)
    base = ("ledger", "witness", "cosign", "--key", key, "--state", state, "--log-key", vkey)
    await log.ok(*base, "--digest", old)
    runs = [log.cli(*base, "--digest", new, "--proof", proof) for _ in range(3)]
    runs += [log.cli(*base, "--digest", old) for _ in range(3)]
    results = await asyncio.gather(*runs)
    assert all(r.code == 0 for r in results[:3]), [r.stderr for r in results]
    assert json.loads(state.read_text())["tree_size"] == Digest.from_json(new.read_text()).tree_size
    assert os.listdir(log.folder).count("racer.state") == 1


async def test_a_database_that_cannot_be_reached_leaves_the_state_as_it_was(log: Log) -> None:
    vkey = await log_vkey(log)
    key, _ = await witness(log, "offline")
    state = log.folder / "offline.state"
    base = ("ledger", "witness", "cosign", "--key", key, "--state", state, "--log-key", vkey)
    await log.ok(*base, "--digest", await log.digest("offline-1.json"))
    before = state.read_bytes()
    later = await log.digest("offline-2.json")
    down = "postgresql://postgres@127.0.0.1:1/signoff_down"
    result = await log.cli(*base, "--digest", later, "--from-database", url=down)
    assert result.code == 2 and len(result.stderr.splitlines()) == 1, result.stderr
    assert "cannot connect" in result.stderr
    assert state.read_bytes() == before
