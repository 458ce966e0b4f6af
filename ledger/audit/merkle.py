"""RFC 6962 / RFC 9162 Merkle trees: hashing, roots, inclusion and consistency proofs.

Pure Python and stdlib only, so the standalone verifier (`.verifier`) can use it without the
database layer.

Hashing (RFC 9162 §2.1.1): `leaf = SHA-256(0x00 || data)`, `node = SHA-256(0x01 || left || right)`.
The root of n leaves, MTH(D[n]), splits at k, the largest power of two smaller than n:
`MTH(D[n]) = node(MTH(D[0:k]), MTH(D[k:n]))`; one leaf's root is its leaf hash and the empty
tree's root is SHA-256 of nothing.

Proofs are generated as RFC 9162 §2.1.3.1 (PATH) and §2.1.4.1 (PROOF) define them and verified
with the algorithms of §2.1.3.2 and §2.1.4.2, which walk up from the leaf (or the old tree's
right edge) and never build a tree.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence

__all__ = [
    "EMPTY_ROOT",
    "HASH_SIZE",
    "MerkleTree",
    "RootBuilder",
    "Subtree",
    "consistency_path",
    "inclusion_path",
    "leaf_hash",
    "node_hash",
    "root_from_inclusion_proof",
    "verify_consistency",
    "verify_inclusion",
]

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()
"""MTH of the empty tree."""
_LEAF = b"\x00"
_NODE = b"\x01"


def leaf_hash(data: bytes) -> bytes:
    """The RFC 6962 hash of one leaf: SHA-256(0x00 || data)."""
    return hashlib.sha256(_LEAF + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """The RFC 6962 hash of an inner node: SHA-256(0x01 || left || right)."""
    return hashlib.sha256(_NODE + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than n (n > 1)."""
    return 1 << ((n - 1).bit_length() - 1)


class MerkleTree:
    """A Merkle tree over a list of leaf hashes, with every level kept for proofs.

    Level j holds one hash per 2**j leaves; an odd node at the end of a level is carried up
    unchanged. Node i of level j is then MTH of leaves [i * 2**j, min((i + 1) * 2**j, n)), so
    every subtree the RFC's recursion asks for is either one stored node or a few of them
    combined, and a tree of n leaves costs n leaf hashes plus n - 1 node hashes once.
    Levels are flat `bytes` (32 bytes per hash) to keep a million leaves in ~64 MB.
    """

    def __init__(self, leaf_hashes: Iterable[bytes]) -> None:
        level = b"".join(leaf_hashes)
        if len(level) % HASH_SIZE:
            raise ValueError("leaf hashes must be 32 bytes each")
        self.size = len(level) // HASH_SIZE
        self._levels = [level]
        while len(level) > HASH_SIZE:
            level = _next_level(level)
            self._levels.append(level)

    @classmethod
    def from_data(cls, leaves: Iterable[bytes]) -> MerkleTree:
        """A tree whose leaves are `leaf_hash(d)` for each `d`."""
        return cls(leaf_hash(d) for d in leaves)

    def leaf(self, index: int) -> bytes:
        """The leaf hash at `index`."""
        self._check_index(index, self.size)
        return self._levels[0][index * HASH_SIZE : (index + 1) * HASH_SIZE]

    def root(self, size: int | None = None) -> bytes:
        """MTH of the first `size` leaves (default: all)."""
        size = self.size if size is None else size
        self._check_size(size)
        return EMPTY_ROOT if size == 0 else self._subtree(0, size)

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """PATH(index, D[0:size]): the audit path of leaf `index` in the tree of `size` leaves."""
        size = self.size if size is None else size
        self._check_size(size)
        self._check_index(index, size)
        return inclusion_path(index, size, self._subtree)

    def consistency_proof(self, old_size: int, new_size: int | None = None) -> list[bytes]:
        """PROOF(old_size, D[0:new_size]): proves the first tree is a prefix of the second.

        Empty when `old_size` is 0 or equals `new_size` (nothing to prove).
        """
        new_size = self.size if new_size is None else new_size
        self._check_size(new_size)
        if not 0 <= old_size <= new_size:
            raise ValueError(f"old size {old_size} must be between 0 and {new_size}")
        return consistency_path(old_size, new_size, self._subtree)

    def _subtree(self, start: int, end: int) -> bytes:
        """MTH(D[start:end]) for 0 <= start < end <= size."""
        length = end - start
        level = (length - 1).bit_length()  # smallest j with 2**j >= length
        width = 1 << level
        if start % width == 0 and (length == width or end == self.size):
            offset = (start >> level) * HASH_SIZE
            return self._levels[level][offset : offset + HASH_SIZE]
        k = _split(length)
        return node_hash(self._subtree(start, start + k), self._subtree(start + k, end))

    def _check_size(self, size: int) -> None:
        if not 0 <= size <= self.size:
            raise ValueError(f"tree size {size} is not between 0 and {self.size}")

    @staticmethod
    def _check_index(index: int, size: int) -> None:
        if not 0 <= index < size:
            raise ValueError(f"leaf index {index} is not below the tree size {size}")


Subtree = Callable[[int, int], bytes]
"""MTH(D[start:end]) of one tree, for `start < end`; `end` is a power-of-two step from `start`
or the tree's size, as the proofs below ask."""


def inclusion_path(index: int, size: int, subtree: Subtree) -> list[bytes]:
    """PATH(index, D[0:size]) (RFC 9162 §2.1.3.1), the subtree hashes coming from `subtree`."""
    path: list[bytes] = []
    start, end = 0, size
    # The RFC's recursion, unrolled: it descends from the root, so siblings come out
    # root-first and are reversed at the end (the path lists the leaf's sibling first).
    while end - start > 1:
        k = _split(end - start)
        if index < start + k:
            path.append(subtree(start + k, end))
            end = start + k
        else:
            path.append(subtree(start, start + k))
            start += k
    path.reverse()
    return path


def consistency_path(old_size: int, new_size: int, subtree: Subtree) -> list[bytes]:
    """PROOF(old_size, D[0:new_size]) (RFC 9162 §2.1.4.1); empty when `old_size` is 0 or
    `new_size`."""
    if old_size in (0, new_size):
        return []
    proof: list[bytes] = []
    start, end, m, complete = 0, new_size, old_size, True
    # SUBPROOF(m, D[start:end], complete), unrolled the same way as the audit path.
    while m != end - start:
        k = _split(end - start)
        if m <= k:
            proof.append(subtree(start + k, end))
            end = start + k
        else:
            proof.append(subtree(start, start + k))
            start, m, complete = start + k, m - k, False
    if not complete:
        proof.append(subtree(start, end))
    proof.reverse()
    return proof


def _next_level(level: bytes) -> bytes:
    count = len(level) // HASH_SIZE
    sha256 = hashlib.sha256
    out = [
        sha256(_NODE + level[i : i + 2 * HASH_SIZE]).digest()
        for i in range(0, (count - 1) * HASH_SIZE, 2 * HASH_SIZE)
    ]
    if count % 2:
        out.append(level[-HASH_SIZE:])
    return b"".join(out)


class RootBuilder:
    """MTH of a stream of leaves in O(log n) memory, for roots over journals of any length.

    Keeps the roots of the perfect subtrees the leaves so far fill (a "compact range"): appending
    merges equal-sized neighbours, and the root folds them right to left, which is exactly the
    RFC's largest-power-of-two split.
    """

    def __init__(self) -> None:
        self.size = 0
        self._stack: list[tuple[int, bytes]] = []  # (leaf count, hash), counts strictly falling

    @classmethod
    def resume(cls, size: int, nodes: Sequence[bytes]) -> RootBuilder:
        """A builder that has seen `size` leaves, from their compact range: the roots of the
        perfect subtrees of `size`'s binary digits, largest (leftmost) first."""
        counts = [1 << bit for bit in reversed(range(size.bit_length())) if size >> bit & 1]
        if len(counts) != len(nodes):
            raise ValueError(f"a tree of {size} leaves has {len(counts)} compact-range nodes")
        builder = cls()
        builder.size = size
        builder._stack = list(zip(counts, nodes, strict=True))
        return builder

    def compact_range(self) -> list[bytes]:
        """The roots of the perfect subtrees the leaves so far fill, largest first."""
        return [node for _, node in self._stack]

    def append(self, leaf: bytes) -> None:
        """Add the next leaf hash (already `leaf_hash`-ed)."""
        self.size += 1
        count, current = 1, leaf
        stack = self._stack
        while stack and stack[-1][0] == count:
            current = node_hash(stack.pop()[1], current)
            count *= 2
        stack.append((count, current))

    def root(self) -> bytes:
        """MTH of the leaves appended so far."""
        if not self._stack:
            return EMPTY_ROOT
        current = self._stack[-1][1]
        for _, left in reversed(self._stack[:-1]):
            current = node_hash(left, current)
        return current


def root_from_inclusion_proof(
    leaf: bytes, index: int, size: int, proof: Sequence[bytes]
) -> bytes | None:
    """The root that `proof` leads to from leaf hash `leaf` at `index` in a tree of `size`
    leaves (RFC 9162 §2.1.3.2), or None when the proof cannot be one for that place."""
    if not 0 <= index < size:
        return None
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return None  # longer than the path to the root
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    return r if sn == 0 else None


def verify_inclusion(
    leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes
) -> bool:
    """Whether `proof` shows leaf hash `leaf` at `index` in the tree of `size` with `root`."""
    return root_from_inclusion_proof(leaf, index, size, proof) == root


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> bool:
    """Whether `proof` shows the tree (`old_size`, `old_root`) is a prefix of the tree
    (`new_size`, `new_root`) (RFC 9162 §2.1.4.2)."""
    if not 0 <= old_size <= new_size:
        return False
    if old_size == new_size:
        return not proof and old_root == new_root
    if old_size == 0:
        # Every tree extends the empty one; its root is fixed, so check that much.
        return not proof and old_root == EMPTY_ROOT
    if not proof:
        return False
    path = list(proof)
    if old_size & (old_size - 1) == 0:  # a power of two: the old root is a node of the new tree
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and fr == old_root and sr == new_root
