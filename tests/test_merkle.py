"""RFC 6962 Merkle trees: roots, proofs and their verification agree with the RFC's definitions."""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from ledger.audit.merkle import (
    EMPTY_ROOT,
    MerkleTree,
    RootBuilder,
    leaf_hash,
    node_hash,
    verify_consistency,
    verify_inclusion,
)

# The Certificate Transparency reference leaves and the RFC 6962 roots of their prefixes.
CT_LEAVES = [
    bytes.fromhex(h)
    for h in (
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    )
]
CT_ROOTS = [
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]


# -- the RFC's recursive definitions, written as plainly as possible ---------------------------


def split(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def mth(data: Sequence[bytes]) -> bytes:
    if not data:
        return EMPTY_ROOT
    if len(data) == 1:
        return leaf_hash(data[0])
    k = split(len(data))
    return node_hash(mth(data[:k]), mth(data[k:]))


def path(m: int, data: Sequence[bytes]) -> list[bytes]:
    if len(data) <= 1:
        return []
    k = split(len(data))
    if m < k:
        return [*path(m, data[:k]), mth(data[k:])]
    return [*path(m - k, data[k:]), mth(data[:k])]


def subproof(m: int, data: Sequence[bytes], complete: bool) -> list[bytes]:
    if m == len(data):
        return [] if complete else [mth(data)]
    k = split(len(data))
    if m <= k:
        return [*subproof(m, data[:k], complete), mth(data[k:])]
    return [*subproof(m - k, data[k:], False), mth(data[:k])]


def leaves(n: int, seed: int = 0) -> list[bytes]:
    return [f"leaf-{seed}-{i}".encode() for i in range(n)]


def flipped(value: bytes) -> bytes:
    return bytes([value[0] ^ 1]) + value[1:]


# -- roots ---------------------------------------------------------------------------------------


def test_roots_match_the_certificate_transparency_vectors() -> None:
    tree = MerkleTree.from_data(CT_LEAVES)
    for size, expected in enumerate(CT_ROOTS):
        assert tree.root(size).hex() == expected, f"size {size}"
        builder = RootBuilder()
        for data in CT_LEAVES[:size]:
            builder.append(leaf_hash(data))
        assert builder.root().hex() == expected


def test_published_proofs_are_reproduced() -> None:
    tree = MerkleTree.from_data(CT_LEAVES)
    assert [h.hex()[:16] for h in tree.inclusion_proof(0)] == [
        "96a296d224f285c6",
        "5f083f0a1a33ca07",
        "6b47aaf29ee3c2af",
    ]
    assert [h.hex()[:16] for h in tree.inclusion_proof(5)] == [
        "bc1a0643b12e4d2d",
        "ca854ea128ed050b",
        "d37ee418976dd957",
    ]
    assert [h.hex()[:16] for h in tree.consistency_proof(2, 5)] == [
        "5f083f0a1a33ca07",
        "bc1a0643b12e4d2d",
    ]


@pytest.mark.parametrize("n", range(71))
def test_root_of_every_prefix_equals_the_recursive_definition(n: int) -> None:
    data = leaves(n)
    tree = MerkleTree.from_data(data)
    builder = RootBuilder()
    for size in range(n + 1):
        expected = mth(data[:size])
        assert tree.root(size) == expected, f"root of the first {size} of {n}"
        assert builder.root() == expected and builder.size == size
        if size < n:
            builder.append(leaf_hash(data[size]))


def test_random_large_trees_agree_with_the_recursive_definition() -> None:
    rng = random.Random(6962)
    for n in [*rng.sample(range(71, 3000), 12), 1024, 1025, 2047, 4096]:
        data = leaves(n, seed=n)
        tree = MerkleTree.from_data(data)
        assert tree.root() == mth(data)
        for index in rng.sample(range(n), 5):
            proof = tree.inclusion_proof(index)
            assert proof == path(index, data)
            assert verify_inclusion(leaf_hash(data[index]), index, n, proof, tree.root())
        for old in [*rng.sample(range(1, n), 5), n - 1, split(n)]:
            proof = tree.consistency_proof(old)
            assert proof == subproof(old, data, True)
            assert verify_consistency(old, n, mth(data[:old]), tree.root(), proof)


def test_a_hundred_thousand_leaves_take_well_under_a_second() -> None:
    import time

    hashes = [leaf_hash(i.to_bytes(8, "big")) for i in range(100_000)]
    started = time.perf_counter()
    tree = MerkleTree(hashes)
    tree.inclusion_proof(54_321)
    tree.consistency_proof(77_777)
    assert time.perf_counter() - started < 1.0


# -- inclusion -----------------------------------------------------------------------------------


@pytest.mark.parametrize("n", range(1, 71))
def test_every_inclusion_proof_matches_path_and_verifies(n: int) -> None:
    data = leaves(n)
    tree = MerkleTree.from_data(data)
    for size in range(1, n + 1):
        root = mth(data[:size])
        for index in range(size):
            proof = tree.inclusion_proof(index, size)
            assert proof == path(index, data[:size]), f"PATH({index}, D[{size}])"
            assert verify_inclusion(leaf_hash(data[index]), index, size, proof, root)


@pytest.mark.parametrize("n", range(1, 40))
def test_wrong_inclusion_claims_are_rejected(n: int) -> None:
    data = leaves(n)
    tree = MerkleTree.from_data(data)
    root = tree.root()
    for index in range(n):
        leaf = leaf_hash(data[index])
        proof = tree.inclusion_proof(index)
        for other in {index - 1, index + 1, n, n + 5, -1} - {index}:
            assert not verify_inclusion(leaf, other, n, proof, root), f"index {other}"
        # (A wrong tree size is not always caught by the path alone: the size is authenticated
        # by the signed digest that carries it.)
        assert not verify_inclusion(leaf, index, n, proof, flipped(root))
        assert not verify_inclusion(flipped(leaf), index, n, proof, root)
        assert not verify_inclusion(leaf_hash(b"other"), index, n, proof, root)
        for i in range(len(proof)):
            tampered = [*proof[:i], flipped(proof[i]), *proof[i + 1 :]]
            assert not verify_inclusion(leaf, index, n, tampered, root), f"element {i}"
        if proof:
            assert not verify_inclusion(leaf, index, n, proof[:-1], root), "truncated"
        assert not verify_inclusion(leaf, index, n, [*proof, root], root), "extended"


# -- consistency ---------------------------------------------------------------------------------


@pytest.mark.parametrize("n", range(1, 71))
def test_every_consistency_proof_matches_proof_and_verifies(n: int) -> None:
    data = leaves(n)
    tree = MerkleTree.from_data(data)
    for new in range(1, n + 1):
        new_root = mth(data[:new])
        for old in range(new + 1):
            proof = tree.consistency_proof(old, new)
            if 0 < old < new:
                assert proof == subproof(old, data[:new], True), f"PROOF({old}, D[{new}])"
            else:
                assert proof == []
            assert verify_consistency(old, new, mth(data[:old]), new_root, proof), (old, new)


@pytest.mark.parametrize("n", range(2, 40))
def test_wrong_consistency_claims_are_rejected(n: int) -> None:
    data = leaves(n)
    tree = MerkleTree.from_data(data)
    new_root = tree.root()
    forked = MerkleTree.from_data([*data[:-1], b"rewritten"]).root()
    for old in range(1, n):
        old_root = mth(data[:old])
        proof = tree.consistency_proof(old)
        assert not verify_consistency(old, n, old_root, forked, proof), "rewritten history"
        assert not verify_consistency(old, n, flipped(old_root), new_root, proof)
        assert not verify_consistency(old, n, old_root, flipped(new_root), proof)
        for size in {old - 1, old + 1} - {0, n}:
            assert not verify_consistency(size, n, old_root, new_root, proof), f"old {size}"
        assert not verify_consistency(n, old, new_root, old_root, proof), "reversed"
        for i in range(len(proof)):
            tampered = [*proof[:i], flipped(proof[i]), *proof[i + 1 :]]
            assert not verify_consistency(old, n, old_root, new_root, tampered), f"element {i}"
        assert not verify_consistency(old, n, old_root, new_root, proof[:-1]), "truncated"
        assert not verify_consistency(old, n, old_root, new_root, [*proof, new_root])
    assert not verify_consistency(n, n, new_root, forked, []), "same size, other root"
    assert not verify_consistency(n, n, new_root, new_root, [new_root]), "same size, a proof"
    assert not verify_consistency(0, n, flipped(EMPTY_ROOT), new_root, [])


def test_bad_arguments_are_refused() -> None:
    tree = MerkleTree.from_data(leaves(5))
    for call in (
        lambda: tree.inclusion_proof(5),
        lambda: tree.inclusion_proof(-1),
        lambda: tree.inclusion_proof(0, 6),
        lambda: tree.consistency_proof(4, 3),
        lambda: tree.root(6),
        lambda: MerkleTree([b"short"]),
    ):
        with pytest.raises(ValueError):
            call()
