"""The offline verifier's failures are typed and carry what disagrees, and `Invalid` still
catches every one of them."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ledger.audit.merkle import MerkleTree
from ledger.audit.verifier import (
    ConsistencyProof,
    Digest,
    DigestInvalid,
    HistoryRewritten,
    Invalid,
    SignatureInvalid,
    UnknownSigningKey,
    check_consistency,
    check_digest,
)

KEY_ID = "sig-offline"


def signed(tree: MerkleTree, size: int, key: Ed25519PrivateKey) -> Digest:
    unsigned = Digest(size, tree.root(size), size, datetime.now(UTC), KEY_ID, b"")
    return dataclasses.replace(unsigned, signature=key.sign(unsigned.message()))


@pytest.fixture
def key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def public_keys(key: Ed25519PrivateKey) -> dict[str, bytes]:
    return {KEY_ID: key.public_key().public_bytes_raw()}


def test_a_digest_signed_by_an_unknown_key_names_that_key(key: Ed25519PrivateKey) -> None:
    digest = signed(MerkleTree.from_data([b"a", b"b"]), 2, key)
    with pytest.raises(UnknownSigningKey) as failed:
        check_digest(digest, {"sig-other": public_keys(key)[KEY_ID]})
    assert (failed.value.key_id, failed.value.known) == (KEY_ID, ("sig-other",))
    assert isinstance(failed.value, Invalid)


def test_an_altered_digest_fails_its_signature(key: Ed25519PrivateKey) -> None:
    digest = dataclasses.replace(signed(MerkleTree.from_data([b"a"]), 1, key), last_position=7)
    with pytest.raises(SignatureInvalid) as failed:
        check_digest(digest, public_keys(key))
    assert (failed.value.key_id, failed.value.signed) == (KEY_ID, "digest")


def test_a_rewritten_history_names_both_sizes(key: Ed25519PrivateKey) -> None:
    tree = MerkleTree.from_data([b"a", b"b", b"c", b"d"])
    rewritten = MerkleTree.from_data([b"a", b"B", b"c", b"d"])
    old, new = signed(rewritten, 2, key), signed(tree, 4, key)
    proof = ConsistencyProof(2, old.root, 4, new.root, tuple(tree.consistency_proof(2, 4)))
    with pytest.raises(HistoryRewritten) as failed:
        check_consistency(old, new, proof, public_keys(key))
    assert (failed.value.old_size, failed.value.new_size) == (2, 4)


def test_one_bad_digest_of_a_pair_says_which_and_why(key: Ed25519PrivateKey) -> None:
    tree = MerkleTree.from_data([b"a", b"b"])
    old, new = signed(tree, 1, key), signed(tree, 2, key)
    proof = ConsistencyProof(1, old.root, 2, new.root, tuple(tree.consistency_proof(1, 2)))
    check_consistency(old, new, proof, public_keys(key))
    forged = dataclasses.replace(new, signature=bytes(64))
    with pytest.raises(DigestInvalid) as failed:
        check_consistency(old, forged, proof, public_keys(key))
    assert failed.value.which == "new" and isinstance(failed.value.cause, SignatureInvalid)
