"""C2SP checkpoints, signed notes and cosignatures: Signoff's vectors (tests/vectors) checked by a
reimplementation written here from the specs, the published vectors of c2sp.org/signed-note and
golang.org/x/mod's sumdb/note, and the digests' checkpoints against the journal."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ledger.audit.checkpoint import (
    COSIGNATURE_V1,
    ED25519,
    Checkpoint,
    MalformedNote,
    NoteSignature,
    SignedNote,
    SignerKey,
    VerifierKey,
    cosign,
    cosigned_by,
    sign_checkpoint,
    signed_by,
    valid_cosigners,
)
from ledger.audit.digest import signing_keys, take_digest
from ledger.audit.merkle import MerkleTree
from ledger.audit.verifier import Digest, Invalid, check_digest, check_witnesses
from ledger.journal import Journal
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.settings import Settings
from tests.support.scratch import scratch_database

from .support.processes import TEST_KEK
from .test_digest import fill, settle

VECTORS = Path(__file__).parent / "vectors"
ORIGIN = "example.com/signoff/test"

# c2sp.org/signed-note, "Verifier keys", Example (C2SP/C2SP signed-note.md).
SPEC_VKEY = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k"
SPEC_NOTE = (
    "This is an example message.\n\n\u2014 example.com/foo "
    "Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n"
)
# golang.org/x/mod/sumdb/note, the package documentation's example (ExampleSign, ExampleOpen).
GO_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
GO_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
GO_TEXT = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
)
GO_NOTE = (
    GO_TEXT + "\n\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZ"
    "SNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
)


# -- an independent reading of the specs ----------------------------------------------------------


def hand_parse(note: bytes) -> tuple[bytes, list[tuple[str, bytes]]]:
    """signed-note by hand: text up to the last blank line, then `— name base64` lines."""
    text, _, block = note.rpartition(b"\n\n")
    lines = block.decode().split("\n")
    assert lines[-1] == ""
    signatures = []
    for line in lines[:-1]:
        dash, name, encoded = line.split(" ")
        assert dash == "\u2014"
        signatures.append((name, base64.b64decode(encoded, validate=True)))
    return text + b"\n", signatures


def hand_vkey(vkey: str) -> tuple[str, bytes, int, bytes]:
    name, hex_id, encoded = vkey.split("+", 2)
    raw = base64.b64decode(encoded)
    return name, bytes.fromhex(hex_id), raw[0], raw[1:]


def hand_key_id(name: str, kind: int, public: bytes) -> bytes:
    return hashlib.sha256(name.encode() + b"\x0a" + bytes([kind]) + public).digest()[:4]


def hand_verify(public: bytes, signature: bytes, message: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(public).verify(signature, message)
    except InvalidSignature:
        return False
    return True


# -- Signoff's vectors ----------------------------------------------------------------------------


def vector() -> dict[str, object]:
    doc: dict[str, object] = json.loads((VECTORS / "checkpoint.json").read_text())
    return doc


def test_the_vector_checkpoint_verifies_by_a_reimplementation_of_the_specs() -> None:
    v = vector()
    note = (VECTORS / "checkpoint.txt").read_bytes()
    name, hex_id, kind, public = hand_vkey((VECTORS / "checkpoint.vkey").read_text().strip())
    assert (name, kind) == (v["origin"], 0x01)
    assert hand_key_id(name, 0x01, public) == hex_id
    text, signatures = hand_parse(note)
    origin, size, root, empty = text.decode().split("\n")
    leaves = [bytes.fromhex(h) for h in v["leaf_data_hex"]]  # type: ignore[attr-defined]
    assert (origin, int(size), empty) == (v["origin"], v["tree_size"], "")
    assert base64.b64decode(root) == MerkleTree.from_data(leaves).root()
    assert base64.b64decode(root).hex() == v["root_hex"]
    [(signer, raw)] = signatures
    assert signer == name and raw[:4] == hex_id
    assert hand_verify(public, raw[4:], text)
    assert not hand_verify(public, raw[4:], text.replace(b"\n7\n", b"\n8\n"))


def test_the_vector_cosignature_verifies_by_a_reimplementation_of_the_specs() -> None:
    v = vector()
    note = (VECTORS / "checkpoint-cosigned.txt").read_bytes()
    name, hex_id, kind, public = hand_vkey((VECTORS / "witness.vkey").read_text().strip())
    assert (name, kind) == (v["witness_name"], 0x04)
    assert hand_key_id(name, 0x04, public) == hex_id
    text, signatures = hand_parse(note)
    assert text == hand_parse((VECTORS / "checkpoint.txt").read_bytes())[0]
    [raw] = [raw for signer, raw in signatures if signer == name and raw[:4] == hex_id]
    (timestamp,) = struct.unpack(">Q", raw[4:12])
    assert timestamp == v["cosignature_timestamp"]
    message = b"cosignature/v1\ntime " + str(timestamp).encode() + b"\n" + text
    assert hand_verify(public, raw[12:], message)
    assert not hand_verify(public, raw[12:], message.replace(b"time 1", b"time 2"))


def test_signoff_makes_the_vectors_byte_for_byte_from_their_seeds() -> None:
    v = vector()
    log = SignerKey(str(v["origin"]), ED25519, bytes.fromhex(str(v["log_seed_hex"])))
    assert log.skey == v["log_skey"] and log.verifier.vkey == v["log_vkey"]
    assert SignerKey.parse(log.skey) == log
    assert (VECTORS / "checkpoint.vkey").read_text() == log.verifier.vkey + "\n"
    root = bytes.fromhex(str(v["root_hex"]))
    checkpoint = Checkpoint(log.name, int(str(v["tree_size"])), root)
    note = sign_checkpoint(checkpoint, log.verifier.public_key, log.private.sign)
    assert note == (VECTORS / "checkpoint.txt").read_text()
    witness = SignerKey(
        str(v["witness_name"]), COSIGNATURE_V1, bytes.fromhex(str(v["witness_seed_hex"]))
    )
    assert witness.skey == v["witness_skey"] and witness.verifier.vkey == v["witness_vkey"]
    parsed = SignedNote.parse(note)
    line = cosign(parsed, witness, int(str(v["cosignature_timestamp"])))
    assert parsed.adding(line).render() == (VECTORS / "checkpoint-cosigned.txt").read_text()


# -- published vectors ----------------------------------------------------------------------------


def test_the_signed_note_specs_example_verifies() -> None:
    key = VerifierKey.parse(SPEC_VKEY)
    assert key.vkey == SPEC_VKEY
    note = SignedNote.parse(SPEC_NOTE)
    assert note.text == "This is an example message.\n"
    assert signed_by(note, key)
    assert not signed_by(SignedNote(note.text.replace("an", "no"), note.signatures), key)
    assert note.render() == SPEC_NOTE


def test_the_go_sumdb_note_example_signs_and_verifies_byte_for_byte() -> None:
    signer = SignerKey.parse(GO_SKEY)
    assert signer.skey == GO_SKEY
    assert signer.verifier.vkey == GO_VKEY
    line = NoteSignature(signer.name, signer.verifier.key_id, signer.private.sign(GO_TEXT.encode()))
    assert SignedNote(GO_TEXT, (line,)).render() == GO_NOTE
    assert signed_by(SignedNote.parse(GO_NOTE), VerifierKey.parse(GO_VKEY))


# -- rules of signed-note -------------------------------------------------------------------------


def test_lines_of_unknown_keys_are_ignored_and_a_name_or_id_alone_does_not_match() -> None:
    log = SignerKey.generate(ORIGIN, ED25519)
    other = SignerKey.generate(ORIGIN, ED25519)  # the same name, another key (another id)
    checkpoint = Checkpoint(ORIGIN, 3, bytes(range(32)))
    note = SignedNote.parse(sign_checkpoint(checkpoint, log.verifier.public_key, log.private.sign))
    stranger = NoteSignature("someone.else", log.verifier.key_id, bytes(64))  # same id
    noisy = note.adding(stranger)
    assert signed_by(noisy, log.verifier)
    assert not signed_by(noisy, other.verifier)
    assert SignedNote.parse(noisy.render()) == noisy


@pytest.mark.parametrize(
    "note",
    [
        "no blank line\n\u2014 a AAAAAAA=\n",
        "text\n\n",
        "text\n\n- a AAAAAAAA\n",
        "text\n\n\u2014 a+b AAAAAAAA\n",
        "te\x07xt\n\n\u2014 a AAAAAAAA\n",
        "text\n\n\u2014 a AAAAAAAA",
        "text\n\n\u2014 a AAAA\n",
        "text\n\n\u2014 a AAAAAAAA\u2028\u2014 b AAAAAAAA\n",
    ],
)
def test_malformed_notes_are_refused(note: str) -> None:
    with pytest.raises(MalformedNote):
        SignedNote.parse(note)


@pytest.mark.parametrize(
    "text",
    ["origin\n7\n", "origin\n07\nAAAA\n", "origin\n7\nnotbase64!\n", "origin\n7\n\n", "o\n-1\nx\n"],
)
def test_malformed_checkpoints_are_refused(text: str) -> None:
    with pytest.raises(MalformedNote):
        Checkpoint.parse(text)


def test_vkeys_with_a_wrong_key_id_or_type_are_refused() -> None:
    name, hex_id, _, public = hand_vkey(SPEC_VKEY)
    ecdsa_typed = base64.b64encode(bytes([0x02]) + public).decode()
    for bad in (
        f"{name}+00000000+{SPEC_VKEY.split('+', 2)[2]}",
        f"{name}+{hex_id.hex()}+{ecdsa_typed}",
        f"a b+{hex_id.hex()}+{SPEC_VKEY.split('+', 2)[2]}",
    ):
        with pytest.raises(MalformedNote):
            VerifierKey.parse(bad)


def test_cosignatures_count_once_per_witness_and_bad_ones_not_at_all() -> None:
    log = SignerKey.generate(ORIGIN, ED25519)
    checkpoint = Checkpoint(ORIGIN, 5, bytes(32))
    note = SignedNote.parse(sign_checkpoint(checkpoint, log.verifier.public_key, log.private.sign))
    w1, w2, w3 = (SignerKey.generate(f"witness.example/{i}") for i in range(3))
    good = note.adding(cosign(note, w1, 1_800_000_000))
    line = cosign(note, w2, 1_800_000_000)
    # One bit flipped: a changed signature whatever its last byte was.
    forged = NoteSignature(
        line.name, line.key_id, line.signature[:-1] + bytes([line.signature[-1] ^ 0x01])
    )
    signed = good.adding(forged)
    assert cosigned_by(signed, w1.verifier) == 1_800_000_000
    assert cosigned_by(signed, w2.verifier) is None
    # The log's signature is no cosignature, and a witness given as a type 0x01 vkey still is one.
    assert cosigned_by(signed, log.verifier) is None
    plain = VerifierKey(w1.name, ED25519, w1.verifier.public_key)
    keys = [w1.verifier, plain, w2.verifier, w3.verifier]
    assert [k.name for k in valid_cosigners(signed, keys)] == [w1.name]


# -- the journal's checkpoints --------------------------------------------------------------------


@pytest.fixture(scope="module")
async def origin_db(server_url: str) -> AsyncIterator[Database]:
    """A database of this module's own, whose settings name the log's origin."""
    async with scratch_database(server_url, prefix="signoff_test") as url:
        settings = Settings(database_url=url, kek=LocalKek(TEST_KEK), log_origin=ORIGIN)
        async with await Database.from_settings(settings) as db:
            yield db


async def test_a_digest_carries_its_checkpoint_signed_by_the_digests_key(
    origin_db: Database,
) -> None:
    ring = await KeyRing.open(origin_db, LocalKek(TEST_KEK))
    await fill(Journal(origin_db))
    await settle(origin_db)
    digest = await take_digest(origin_db, ring)
    assert digest.checkpoint is not None
    assert Digest.from_json(digest.to_json()) == digest
    keys = signing_keys(ring)
    check_digest(digest, keys)
    note = SignedNote.parse(digest.checkpoint)
    assert Checkpoint.parse(note.text) == Checkpoint(ORIGIN, digest.tree_size, digest.root)
    assert signed_by(note, VerifierKey(ORIGIN, ED25519, keys[digest.key_id]))
    # A checkpoint of another tree, or with a broken signature, fails the digest.
    other = note.text.replace(f"\n{digest.tree_size}\n", f"\n{digest.tree_size + 1}\n")
    for forged in (
        SignedNote(other, note.signatures).render(),
        digest.checkpoint.replace("=\n\n", "=\nextra\n\n"),
    ):
        with pytest.raises(Invalid):
            check_digest(dataclasses.replace(digest, checkpoint=forged), keys)
    # A digest without a checkpoint, as they were before, still verifies; it has no witnesses.
    old = dataclasses.replace(digest, checkpoint=None)
    check_digest(Digest.from_json(old.to_json()), keys)
    assert "checkpoint" not in old.to_dict()
    with pytest.raises(Invalid, match="no checkpoint"):
        check_witnesses(old, [], 0)


async def test_a_log_without_an_origin_takes_no_checkpoints(db: Database, ring: KeyRing) -> None:
    assert db.settings.log_origin is None
    assert (await take_digest(db, ring)).checkpoint is None


def test_the_origin_must_be_a_key_name() -> None:
    from ledger.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="SIGNOFF_LOG_ORIGIN"):
        Settings.from_env({"SIGNOFF_LOG_ORIGIN": "my log+1"})
    assert (
        Settings.from_env({"SIGNOFF_LOG_ORIGIN": " example.com/x "}).log_origin == "example.com/x"
    )
