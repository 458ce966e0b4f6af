"""Signing keys are authenticated, every sealing key has a nonce budget, and only the key
administrator's functions write `data_keys`: proven with SQL as the table owner and as logins
that hold one role each."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from ledger import errors
from ledger.audit.digest import Digest, take_digest
from ledger.journal import Journal, NewEvent
from ledger.keys import KeyRing, LocalKek, Purpose
from ledger.keys.budget import MAX_CREDIT, MAX_RESERVATION, MIN_LEFT
from ledger.store import Database
from ledger.store.logins import temporary_login

from .support.processes import TEST_KEK, TEST_REVIEWER_KEK, kek_env, run_cli

RESULT_KEY = "SELECT key_id FROM data_keys WHERE purpose = 'result' AND state = 'active'"
SIGNING_KEY = "SELECT key_id FROM data_keys WHERE purpose = 'digest_signing' AND state = 'active'"


@pytest.fixture
async def owner(fresh_database_url: str) -> AsyncIterator[Database]:
    """A fresh database with its keys, on the table owner's login."""
    async with await Database.connect(fresh_database_url) as db:
        await KeyRing.open(db, LocalKek(TEST_KEK))
        yield db


async def fetchval(db: Database, sql: str, *args: object) -> object:
    async with db.connection() as conn:
        return await conn.fetchval(sql, *args)


def raw_public(private: Ed25519PrivateKey) -> bytes:
    return private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


async def cli(url: str, *args: str | Path) -> tuple[int, str, str]:
    result = await run_cli(*map(str, args), database_url=url, env=kek_env())
    return result.code, result.stdout, result.stderr


# -- finding 4: a replaced public key -------------------------------------------------------------


async def forge(owner: Database, out: Path) -> tuple[str, bytes]:
    """A digest of the journal as it is, signed by an attacker who then puts their public key in
    place of the signing key's (as the table owner may): (the key id, the attacker's key)."""
    await Journal(owner).append(
        f"audit:{uuid.uuid4().hex}", [NewEvent("audit.happened", {}, actor="t")], expected_version=0
    )
    real = await take_digest(owner, await KeyRing.open(owner, LocalKek(TEST_KEK)))
    attacker = Ed25519PrivateKey.generate()
    forged = Digest(
        real.tree_size,
        real.root,
        real.last_position,
        real.taken_at,
        real.key_id,
        attacker.sign(real.message()),
    )
    await asyncio.to_thread(out.write_text, forged.to_json())
    public = raw_public(attacker)
    async with owner.connection() as conn:
        await conn.execute(
            "UPDATE data_keys SET public_key = $2 WHERE key_id = $1", real.key_id, public
        )
    return real.key_id, public


async def test_a_replaced_public_key_makes_no_forged_digest_verify_and_is_not_exported(
    owner: Database, fresh_database_url: str, tmp_path: Path
) -> None:
    key_id, _ = await forge(owner, tmp_path / "forged.json")
    code, out, err = await cli(
        fresh_database_url, "ledger", "verify", "--digest", tmp_path / "forged.json"
    )
    assert code == 1, out + err  # a finding, not an error
    assert "digest matches" not in out and "DOES NOT MATCH" in out and key_id in out

    code, out, err = await cli(fresh_database_url, "keys", "export-public")
    assert code == 2 and out == "" and key_id in err


async def test_the_ring_neither_signs_with_nor_publishes_a_key_whose_public_half_is_not_its_own(
    owner: Database, tmp_path: Path
) -> None:
    key_id, attacker = await forge(owner, tmp_path / "forged.json")
    ring = await KeyRing.open(owner, LocalKek(TEST_KEK))
    with pytest.raises(errors.PublicKeyMismatch, match=key_id) as refused:
        ring.sign(b"anything")
    assert refused.value.key_id == key_id
    with pytest.raises(errors.PublicKeyMismatch, match=key_id):
        ring.public_key(key_id)
    # The other purposes keep working, and a key administrator rotates the key out.
    sealed = ring.encrypt(Purpose.RESULT, b"x", b"here")
    assert await ring.decrypt(Purpose.RESULT, sealed, b"here", "here") == b"x"
    new_key = await ring.rotate(Purpose.DIGEST_SIGNING)
    assert ring.sign(b"anything")[0] == new_key
    assert ring.public_key(new_key)[1] != attacker


async def test_each_signing_key_is_recorded_in_the_journal_and_data_keys_is_checked_against_it(
    owner: Database, fresh_database_url: str, tmp_path: Path
) -> None:
    ring = await KeyRing.open(owner, LocalKek(TEST_KEK))
    old = ring.active_key_id(Purpose.DIGEST_SIGNING)
    new = await ring.rotate(Purpose.DIGEST_SIGNING)
    await ring.retire(old)
    events = await Journal(owner).read_stream("keys:digest_signing")
    recorded = {e.data["key_id"]: e.data["public_key"] for e in events if "public_key" in e.data}
    assert [e.type for e in events] == ["key.created", "key.rotated", "key.retired"]
    assert recorded == {k: ring.public_key(k)[1].hex() for k in (old, new)}
    code, out, err = await cli(fresh_database_url, "keys", "export-public")
    assert code == 0, err
    exported = {k["key_id"]: k["public_key"] for k in json.loads(out)["keys"]}
    assert exported == {k: base64.b64encode(bytes.fromhex(v)).decode() for k, v in recorded.items()}

    # A retired key still verifies, so its public key is checked against the journal too.
    async with owner.connection() as conn:
        await conn.execute(
            "UPDATE data_keys SET public_key = $2 WHERE key_id = $1",
            old,
            raw_public(Ed25519PrivateKey.generate()),
        )
    code, _, err = await cli(fresh_database_url, "keys", "export-public")
    assert code == 2 and old in err and "journal" in err


async def test_verify_digest_without_public_keys_warns_that_it_trusts_the_database(
    owner: Database, fresh_database_url: str, tmp_path: Path
) -> None:
    digest = tmp_path / "digest.json"
    assert (await cli(fresh_database_url, "ledger", "digest", "--out", digest))[0] == 0
    code, out, err = await cli(fresh_database_url, "ledger", "verify", "--digest", digest)
    assert code == 0 and "digest matches" in out
    assert "warning" in err and "--public-keys" in err

    keys = tmp_path / "keys.json"
    assert (await cli(fresh_database_url, "keys", "export-public", "--out", keys))[0] == 0
    args = ("ledger", "verify", "--digest", digest, "--public-keys", keys)
    code, out, err = await cli(fresh_database_url, *args)
    assert code == 0 and "warning" not in err


async def test_a_signing_key_whose_public_key_the_journal_never_recorded_is_refused(
    owner: Database, fresh_database_url: str
) -> None:
    """A key put in `data_keys` by hand, with a `key.rotated` event that records no public key:
    nothing vouches for it, so it is refused, and `keys init` does not vouch for it either."""
    kek = LocalKek(TEST_KEK)
    private = Ed25519PrivateKey.generate()
    key_id = "sig-00000000000000aa"
    wrapped = kek.wrap(
        private.private_bytes_raw(), f"signoff.datakey.v1|{key_id}|digest_signing".encode()
    )
    async with owner.transaction() as conn:
        old = await conn.fetchval(
            "SELECT signoff_key_rotate($1, 'digest_signing', $2, $3, $4)",
            key_id,
            kek.kek_id,
            wrapped,
            raw_public(private),
        )
        version = await Journal(owner).stream_version("keys:digest_signing", connection=conn)
        unvouched = {"key_id": key_id, "kek_id": kek.kek_id, "replaces": old}
        await Journal(owner).append(
            "keys:digest_signing",
            [NewEvent("key.rotated", unvouched, actor="signoff")],
            expected_version=version,
            connection=conn,
        )
    code, _, err = await cli(fresh_database_url, "keys", "export-public")
    assert code == 2 and key_id in err and "no public key in the journal" in err
    events = await Journal(owner).read_stream("keys:digest_signing")
    assert (await cli(fresh_database_url, "keys", "init"))[0] == 0
    assert await Journal(owner).read_stream("keys:digest_signing") == events  # nothing recorded
    code, _, err = await cli(fresh_database_url, "keys", "export-public")
    assert code == 2 and key_id in err


# -- finding 11: the nonce budget -----------------------------------------------------------------


async def test_seals_are_counted_per_key_in_blocks_without_a_round_trip_per_seal(
    owner: Database,
) -> None:
    sealed = "SELECT sealed FROM data_keys WHERE key_id = $1"
    key_id = await fetchval(owner, RESULT_KEY)
    start = await fetchval(owner, sealed, key_id)
    ring = await KeyRing.open(owner, LocalKek(TEST_KEK))
    counts = [await fetchval(owner, sealed, key_id)]
    for i in range(3000):
        async with ring.sealing():
            ring.encrypt(Purpose.RESULT, b"value", str(i).encode())
        if (count := await fetchval(owner, sealed, key_id)) != counts[-1]:
            counts.append(count)
    # Reserved ahead in growing blocks, always more than sealed: 3 round trips for 3000 seals.
    assert [c - start for c in counts] == [1024, 3072, 7168]  # type: ignore[operator]


async def test_past_its_budget_a_key_seals_nothing_until_it_is_rotated(
    owner: Database, fresh_database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    key_id = await fetchval(owner, RESULT_KEY)
    async with owner.connection() as conn:
        await conn.execute("UPDATE data_keys SET sealed = 2^31 - 10 WHERE key_id = $1", key_id)
    async with (
        temporary_login(fresh_database_url, "signoff_app") as url,
        await Database.connect(url) as worker,
    ):
        # A worker's ring may not rotate keys: it says to, loudly, and seals what is left.
        with caplog.at_level(logging.WARNING, logger="signoff"):
            ring = await KeyRing.open(worker, LocalKek(TEST_KEK), create_missing=False)
        told = [r for r in caplog.records if "budget" in r.getMessage()]
        assert [(r.levelno, r.__dict__.get("key_id")) for r in told] == [(logging.ERROR, key_id)]
        for i in range(10):
            ring.encrypt(Purpose.RESULT, b"value", str(i).encode())
        with pytest.raises(errors.NonceBudgetExhausted, match="signoff keys rotate result"):
            ring.encrypt(Purpose.RESULT, b"value", b"one more")
        async with ring.sealing():  # asks for no more under that key
            with pytest.raises(errors.NonceBudgetExhausted):
                ring.encrypt(Purpose.RESULT, b"value", b"one more")
        await KeyRing.open(owner, LocalKek(TEST_KEK))  # the owner's ring rotates it
        assert await fetchval(owner, RESULT_KEY) != key_id
        await ring.refresh()
        sealed = ring.encrypt(Purpose.RESULT, b"value", b"after")
        assert await ring.decrypt(Purpose.RESULT, sealed, b"after", "after") == b"value"


async def test_seals_beyond_the_reservation_run_on_credit_the_next_sealing_counts(
    owner: Database,
) -> None:
    sealed = "SELECT sealed FROM data_keys WHERE key_id = $1"
    ring = await KeyRing.open(owner, LocalKek(TEST_KEK))
    key_id = ring.active_key_id(Purpose.CHECKPOINT)
    before = await fetchval(owner, sealed, key_id)
    for i in range(MIN_LEFT + MAX_CREDIT):  # what it reserved, then all the credit it gets
        ring.encrypt(Purpose.CHECKPOINT, b"v", str(i).encode())
    with pytest.raises(errors.NoNonceReservation, match="sealing"):
        ring.encrypt(Purpose.CHECKPOINT, b"v", b"one more")
    async with ring.sealing():  # counts the credit and reserves the next block (2048)
        counted = await fetchval(owner, sealed, key_id)
        ring.encrypt(Purpose.CHECKPOINT, b"v", b"one more")
    assert counted == before + MAX_CREDIT + 2048  # type: ignore[operator]


# -- every write through the key functions ---------------------------------------------------------


_ADMIN_CALLS = (
    "SELECT signoff_key_create('ckpt-00000000000000ff', 'checkpoint', 'kek-x', '\\x00', NULL)",
    "SELECT signoff_key_rotate('ckpt-00000000000000ff', 'checkpoint', 'kek-x', '\\x00', NULL)",
    "SELECT signoff_key_retire('ckpt-00000000000000ff')",
    "SELECT signoff_key_rewrap('ckpt-00000000000000ff', 'kek-x', '\\x00')",
)


async def test_a_worker_login_writes_no_key_and_still_seals(
    owner: Database, fresh_database_url: str
) -> None:
    key_id = await fetchval(owner, RESULT_KEY)
    async with temporary_login(fresh_database_url, "signoff_app") as url:
        conn = await asyncpg.connect(url)
        try:
            for statement in (
                "UPDATE data_keys SET public_key = NULL",
                "UPDATE data_keys SET sealed = 0",
                "DELETE FROM data_keys",
                "INSERT INTO data_keys (key_id, purpose, state, kek_id, wrapped)"
                " VALUES ('ckpt-00000000000000fe', 'checkpoint', 'decrypt_only', 'k', '\\x00')",
                *_ADMIN_CALLS,
            ):
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    await conn.execute(statement)
            # Reserving only ever adds, and a little.
            before = await conn.fetchval("SELECT sealed FROM data_keys WHERE key_id = $1", key_id)
            for count in (0, -5, MAX_RESERVATION + 1, 2**20):
                with pytest.raises(asyncpg.InvalidParameterValueError):
                    await conn.fetchval("SELECT signoff_reserve_nonces($1, $2)", key_id, count)
            total = await conn.fetchval("SELECT signoff_reserve_nonces($1, 7)", key_id)
            assert total == before + 7
        finally:
            await conn.close()
        async with await Database.connect(url) as worker:
            ring = await KeyRing.open(worker, LocalKek(TEST_KEK), create_missing=False)
            sealed = ring.encrypt(Purpose.RESULT, b"refund 120 EUR", b"call:r/c")
            assert await ring.decrypt(Purpose.RESULT, sealed, b"call:r/c", "c") == b"refund 120 EUR"
            with pytest.raises(errors.DatabaseError):
                await ring.rotate(Purpose.RESULT)
    assert await fetchval(owner, RESULT_KEY) == key_id


async def test_a_key_administrator_login_rotates_and_journals_through_the_functions(
    owner: Database, fresh_database_url: str
) -> None:
    old = str(await fetchval(owner, SIGNING_KEY))
    async with (
        temporary_login(fresh_database_url, "signoff_key_admin") as url,
        await Database.connect(url) as admin,
    ):
        ring = await KeyRing.open(admin, LocalKek(TEST_KEK))
        new = await ring.rotate(Purpose.DIGEST_SIGNING)
        await ring.retire(old)
        assert ring.sign(b"m")[0] == new
    events = await Journal(owner).read_stream("keys:digest_signing")
    assert [e.type for e in events] == ["key.created", "key.rotated", "key.retired"]
    assert events[1].data["public_key"] == ring.public_key(new)[1].hex()


async def test_a_key_administrator_alone_makes_no_decision_key(
    owner: Database, fresh_database_url: str
) -> None:
    """Decision keys sign reviewers' decisions: a key administrator who is not of the reviewer
    side cannot make (or rotate in) one of its own, even holding a reviewer KEK."""
    async with (
        temporary_login(fresh_database_url, "signoff_key_admin") as url,
        await Database.connect(url) as admin,
    ):
        ring = await KeyRing.open(
            admin,
            LocalKek(TEST_KEK),
            reviewer_kek=LocalKek(TEST_REVIEWER_KEK),
            create_missing=False,
        )
        with pytest.raises(errors.PermissionDenied, match="reviewer side"):
            await ring.rotate(Purpose.DECISION_SIGNING)
        assert ring.sign(b"m")[0]  # its own purposes still work
