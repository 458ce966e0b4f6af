"""The key ring: wrapped data keys shared through the database, rotation, KEK errors."""

from __future__ import annotations

import asyncio
import base64
import os
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ledger import ConfigurationError
from ledger.errors import DecryptionFailed, KekMismatch, KekMissing, KeyStateError, UnknownKey
from ledger.journal import Journal
from ledger.keys import KeyRing, KeyState, LocalKek, Purpose, embedded_kek, key_id_of
from ledger.keys.kek_files import kept_kek_folder, new_kept_kek
from ledger.store import Database, migrate
from ledger.store.embedded import ensure_server
from ledger.store.settings import Settings

from .support.embedded_homes import private_home


def new_kek() -> LocalKek:
    return LocalKek(os.urandom(32))


@pytest.fixture
async def keys_db(fresh_database_url: str) -> AsyncIterator[Database]:
    async with await Database.connect(fresh_database_url) as db:
        yield db


async def count(db: Database, sql: str) -> int:
    async with db.connection() as conn:
        value: int = await conn.fetchval(sql)
    return value


async def test_open_creates_one_active_key_per_purpose_once(keys_db: Database) -> None:
    kek = new_kek()
    ring = await KeyRing.open(keys_db, kek)
    assert {k.purpose for k in ring.all_keys() if k.state is KeyState.ACTIVE} == set(Purpose)
    assert await KeyRing.open(keys_db, kek) is not None
    # One per purpose: the decision key under the session's reviewer KEK, the rest under its KEK.
    assert await count(keys_db, "SELECT count(*) FROM data_keys") == len(Purpose)
    events = await Journal(keys_db).read_stream("keys:checkpoint")
    assert [e.type for e in events] == ["key.created"]
    assert events[0].data["kek_id"] == kek.kek_id


async def test_the_database_allows_one_active_key_per_purpose(keys_db: Database) -> None:
    await KeyRing.open(keys_db, new_kek())
    async with keys_db.connection() as conn:
        with pytest.raises(asyncpg.UniqueViolationError):
            await conn.execute(
                "INSERT INTO data_keys (key_id, purpose, state, kek_id, wrapped)"
                " VALUES ('ckpt-00000000', 'checkpoint', 'active', 'kek-x', '\\x00')"
            )


async def test_ciphertexts_carry_their_key_id_and_are_bound_to_their_place(
    keys_db: Database,
) -> None:
    ring = await KeyRing.open(keys_db, new_kek())
    sealed = ring.encrypt(Purpose.RESULT, b"refund 120 EUR", b"call:run-1/c1")
    assert key_id_of(sealed) == ring.active_key_id(Purpose.RESULT)
    assert b"refund" not in sealed
    assert (
        await ring.decrypt(Purpose.RESULT, sealed, b"call:run-1/c1", "call c1") == b"refund 120 EUR"
    )
    with pytest.raises(DecryptionFailed, match="call c2"):
        await ring.decrypt(Purpose.RESULT, sealed, b"call:run-1/c2", "call c2")
    tampered = sealed[:-1] + bytes([sealed[-1] ^ 1])
    with pytest.raises(DecryptionFailed):
        await ring.decrypt(Purpose.RESULT, tampered, b"call:run-1/c1", "call c1")
    with pytest.raises(UnknownKey, match="not a checkpoint key"):
        await ring.decrypt(Purpose.CHECKPOINT, sealed, b"call:run-1/c1", "call c1")
    with pytest.raises(UnknownKey, match="not a Signoff ciphertext"):
        await ring.decrypt(Purpose.RESULT, b"plain text", b"", "call c1")


async def test_sealing_with_current_sees_a_rotation_made_elsewhere_at_once(
    keys_db: Database,
) -> None:
    kek = new_kek()
    worker = await KeyRing.open(keys_db, kek, create_missing=True)
    worker.refresh_seconds = 3600.0  # its cache would otherwise hold the old key this long
    admin = await KeyRing.open(keys_db, kek)
    old_key = worker.active_key_id(Purpose.VALUE_MAC)
    new_key = await admin.rotate(Purpose.VALUE_MAC)
    async with worker.sealing():
        assert worker.active_key_id(Purpose.VALUE_MAC) == old_key
    async with worker.sealing(current=Purpose.VALUE_MAC):
        assert worker.value_mac(b"x")[0] == new_key


async def test_sealing_loads_a_named_key_made_elsewhere(keys_db: Database) -> None:
    kek = new_kek()
    worker = await KeyRing.open(keys_db, kek, create_missing=True)
    worker.refresh_seconds = 3600.0
    admin = await KeyRing.open(keys_db, kek)
    new_key = await admin.rotate(Purpose.VALUE_MAC)
    with pytest.raises(UnknownKey):
        worker.value_mac(b"x", new_key)
    async with worker.sealing(keys=[(new_key, Purpose.VALUE_MAC)]):
        assert worker.value_mac(b"x", new_key) == admin.value_mac(b"x", new_key)


async def test_rotation_reaches_a_running_process_and_old_data_still_opens(
    keys_db: Database,
) -> None:
    kek = new_kek()
    worker = await KeyRing.open(keys_db, kek, create_missing=True)
    worker.refresh_seconds = 0.0  # refresh on every `sealing()`
    admin = await KeyRing.open(keys_db, kek)
    old_sealed = worker.encrypt(Purpose.CHECKPOINT, b"old", b"ctx")
    old_key = worker.active_key_id(Purpose.CHECKPOINT)
    new_key = await admin.rotate(Purpose.CHECKPOINT)
    assert new_key != old_key
    async with worker.sealing():
        assert key_id_of(worker.encrypt(Purpose.CHECKPOINT, b"new", b"ctx")) == new_key
    assert await worker.decrypt(Purpose.CHECKPOINT, old_sealed, b"ctx", "row") == b"old"
    states = {k.key_id: k.state for k in admin.all_keys()}
    assert (states[old_key], states[new_key]) == (KeyState.DECRYPT_ONLY, KeyState.ACTIVE)

    with pytest.raises(KeyStateError, match="not decrypt-only"):
        await admin.retire(new_key)
    await admin.retire(old_key)
    await worker.refresh()
    with pytest.raises(UnknownKey, match="retired"):
        await worker.decrypt(Purpose.CHECKPOINT, old_sealed, b"ctx", "row")
    assert worker.active_key_id(Purpose.CHECKPOINT) == new_key, "retired keys never encrypt"
    types = [e.type for e in await Journal(keys_db).read_stream("keys:checkpoint")]
    assert types == ["key.created", "key.rotated", "key.retired"]


async def test_a_key_created_elsewhere_is_found_without_waiting(keys_db: Database) -> None:
    kek = new_kek()
    reader = await KeyRing.open(keys_db, kek)
    reader.refresh_seconds = 3600.0
    writer = await KeyRing.open(keys_db, kek)
    await writer.rotate(Purpose.RESULT)
    sealed = writer.encrypt(Purpose.RESULT, b"x", b"ctx")
    assert await reader.decrypt(Purpose.RESULT, sealed, b"ctx", "row") == b"x"


async def test_a_wrong_kek_names_the_kek_needed_and_writes_nothing(keys_db: Database) -> None:
    right = new_kek()
    await KeyRing.open(keys_db, right)
    before = await count(keys_db, "SELECT count(*) FROM events")
    wrong = new_kek()
    with pytest.raises(KekMismatch) as caught:
        await KeyRing.open(keys_db, wrong)
    assert right.kek_id in str(caught.value)
    assert (caught.value.needed, caught.value.configured) == (right.kek_id, wrong.kek_id)
    assert await count(keys_db, "SELECT count(*) FROM data_keys") == len(Purpose)
    assert await count(keys_db, "SELECT count(*) FROM events") == before


@pytest.fixture
async def kekless_db(fresh_database_url: str) -> AsyncIterator[Database]:
    """A fresh database for which no KEK is configured: settings with its URL and no KEK (a
    URL never selects the embedded server's KEK file, even one of the embedded server)."""
    settings = Settings(database_url=fresh_database_url)
    async with await Database.connect(fresh_database_url, settings=settings) as db:
        yield db


async def test_a_missing_kek_names_the_kek_needed(
    kekless_db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    right = new_kek()
    await KeyRing.open(kekless_db, right)
    monkeypatch.delenv("SIGNOFF_KEK", raising=False)
    monkeypatch.delenv("SIGNOFF_KEK_FILE", raising=False)
    with pytest.raises(KekMissing, match=right.kek_id):
        await KeyRing.open(kekless_db)


async def test_a_lost_embedded_kek_file_is_missing_not_replaced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SIGNOFF_KEK", raising=False)
    monkeypatch.delenv("SIGNOFF_KEK_FILE", raising=False)
    with private_home() as home:
        url = await asyncio.to_thread(ensure_server, home)
        await asyncio.to_thread(migrate.upgrade, url)
        settings = Settings(embedded_home=home)  # the embedded server, no KEK configured
        async with await Database.connect(url, settings=settings) as db:
            first = await KeyRing.open(db)  # the server's KEK file, made now
            assert first.kek is not None
            (home / "kek").unlink()
            with pytest.raises(KekMissing, match=first.kek.kek_id):
                await KeyRing.open(db)
            assert not (home / "kek").exists()  # no new KEK that could unwrap nothing


async def test_rewrap_moves_every_key_to_a_new_kek_at_once(keys_db: Database) -> None:
    old, new = new_kek(), new_kek()
    ring = await KeyRing.open(keys_db, old)
    sealed = ring.encrypt(Purpose.CHECKPOINT, b"state", b"ctx")
    # Every key but the decision key, which the reviewer-side KEK wraps.
    assert await ring.rewrap(new) == len(Purpose) - 1
    with pytest.raises(KekMismatch):
        await KeyRing.open(keys_db, old)
    reopened = await KeyRing.open(keys_db, new)
    assert await reopened.decrypt(Purpose.CHECKPOINT, sealed, b"ctx", "row") == b"state"
    kek_ids = await count(
        keys_db,
        "SELECT count(DISTINCT kek_id) FROM data_keys WHERE purpose <> 'decision_signing'",
    )
    assert kek_ids == 1  # the decision key stays under the reviewer KEK


async def test_macs_and_signatures(keys_db: Database) -> None:
    ring = await KeyRing.open(keys_db, new_kek())
    key_id, tag = ring.mac(b"binding")
    assert await ring.verify_mac(key_id, b"binding", tag)
    assert not await ring.verify_mac(key_id, b"binding!", tag)
    with pytest.raises(UnknownKey):
        await ring.verify_mac("mac-0000000000000000", b"binding", tag)
    signer, signature = ring.sign(b"tree head")
    public_id, public = ring.public_key()
    assert signer == public_id
    Ed25519PublicKey.from_public_bytes(public).verify(signature, b"tree head")


def test_kek_from_environment(tmp_path: Path) -> None:
    key = os.urandom(32)
    from_env = Settings.from_env({"SIGNOFF_KEK": base64.b64encode(key).decode()}).kek
    assert from_env is not None and from_env.kek_id == LocalKek(key).kek_id
    with pytest.raises(ConfigurationError, match="SIGNOFF_KEK is not base64"):
        Settings.from_env({"SIGNOFF_KEK": "not base64!"})
    with pytest.raises(ConfigurationError, match="32 bytes"):
        Settings.from_env({"SIGNOFF_KEK": base64.b64encode(b"short").decode()})
    assert Settings.from_env({}).kek is None
    local = tmp_path / "embedded" / "kek"
    created = embedded_kek(local)
    assert stat.S_IMODE(local.stat().st_mode) == 0o600
    again = embedded_kek(local)
    assert again.kek_id == created.kek_id


async def test_a_kept_kek_file_opens_a_database_for_which_no_kek_is_configured(
    fresh_database_url: str, tmp_path: Path
) -> None:
    """The one resolver (`ledger.keys.kek_files`): with no KEK configured, the key ring finds the
    kept file named by the KEK its keys need (as `signoff demo` keeps one), never another."""
    settings = Settings(database_url=fresh_database_url, embedded_home=tmp_path / "embedded")
    async with await Database.connect(fresh_database_url, settings=settings) as db:
        path, kek = new_kept_kek(settings)
        assert path == kept_kek_folder(settings) / kek.kek_id and path.parent.name == "keks"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        await KeyRing.open(db, kek)  # the keys, wrapped by the kept KEK

        found = await KeyRing.open(db, create_missing=False)
        assert found.kek is not None and found.kek.kek_id == kek.kek_id

        other_path, _ = new_kept_kek(settings)  # another kept KEK is never taken for it
        path.unlink()
        with pytest.raises(KekMissing) as caught:
            await KeyRing.open(db, create_missing=False)
        assert caught.value.needed == kek.kek_id
        other_path.rename(path)  # a file under the id it does not hold
        with pytest.raises(KekMissing):
            await KeyRing.open(db, create_missing=False)


async def test_a_loaded_key_never_shows_its_material(keys_db: Database) -> None:
    """A ring's loaded keys appear in reprs, tracebacks and debuggers: their material (the
    decision signing key's included) must not."""
    ring = await KeyRing.open(keys_db, new_kek(), reviewer_kek=new_kek())
    loaded = list(ring._keys.values())
    assert loaded
    for key in loaded:
        shown = repr(key)
        assert key.info.key_id in shown
        if key.material is not None:
            assert key.material.hex() not in shown
            assert repr(key.material) not in shown
