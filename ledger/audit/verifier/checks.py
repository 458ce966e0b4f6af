"""The offline checks: a digest's signature (and its checkpoint and witnesses), an event's
inclusion, the consistency of two digests, and exported tiles. Each raises the `failures`
subclass that says what failed first. Standard library and `cryptography` only."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ..checkpoint import (
    ED25519,
    Checkpoint,
    MalformedNote,
    SignedNote,
    VerifierKey,
    signed_by,
    valid_cosigners,
)
from ..merkle import (
    EMPTY_ROOT,
    HASH_SIZE,
    consistency_path,
    inclusion_path,
    leaf_hash,
    verify_consistency,
    verify_inclusion,
)
from ..tiles import TILE_BYTES, TILE_WIDTH, TileReader, tile_path, tile_root, tiles_of
from .documents import ConsistencyProof, Digest, InclusionProof
from .failures import (
    AuditPathMismatch,
    CheckpointMismatch,
    DigestInvalid,
    EventAltered,
    HistoryRewritten,
    Invalid,
    MalformedDocument,
    NotConsistent,
    ProofMismatch,
    RootMismatch,
    SignatureInvalid,
    TileAltered,
    TileUnreadable,
    TooFewWitnesses,
    UnknownSigningKey,
)

__all__ = [
    "check_consistency",
    "check_digest",
    "check_inclusion",
    "check_tiles",
    "check_witnesses",
    "consistency_from_tiles",
    "digest_checkpoint",
    "inclusion_from_tiles",
    "read_tile_directory",
]


def check_digest(digest: Digest, public_keys: Mapping[str, bytes]) -> None:
    """Check the digest's signature under the public key it names.

    Raises:
        Invalid: unknown key or bad signature.
    """
    raw = public_keys.get(digest.key_id)
    if raw is None:
        raise UnknownSigningKey(digest.key_id, tuple(sorted(public_keys)))
    try:
        Ed25519PublicKey.from_public_bytes(raw).verify(digest.signature, digest.message())
    except (InvalidSignature, ValueError) as e:
        raise SignatureInvalid(digest.key_id, "digest") from e
    if digest.checkpoint is not None:
        note, checkpoint = digest_checkpoint(digest)
        if (checkpoint.tree_size, checkpoint.root) != (digest.tree_size, digest.root):
            raise CheckpointMismatch(
                (checkpoint.tree_size, checkpoint.root), (digest.tree_size, digest.root)
            )
        if not signed_by(note, VerifierKey(checkpoint.origin, ED25519, raw)):
            raise SignatureInvalid(digest.key_id, "checkpoint", checkpoint.origin)


def digest_checkpoint(digest: Digest) -> tuple[SignedNote, Checkpoint]:
    """The digest's checkpoint note, parsed (signatures not checked).

    Raises:
        MalformedDocument: the digest has none, or it is not a checkpoint note.
    """
    if digest.checkpoint is None:
        raise MalformedDocument(
            "the digest carries no checkpoint (the log takes checkpoints when it has an origin: "
            "SIGNOFF_LOG_ORIGIN)"
        )
    try:
        note = SignedNote.parse(digest.checkpoint)
        return note, Checkpoint.parse(note.text)
    except MalformedNote as e:
        raise MalformedDocument(f"checkpoint: {e}") from e


def check_witnesses(
    digest: Digest, witness_keys: Sequence[VerifierKey], required: int
) -> list[VerifierKey]:
    """The witnesses among `witness_keys` whose cosignature on the digest's checkpoint
    verifies, when there are at least `required` of them. Unknown and invalid signature lines
    are ignored (signed-note), not counted; the log's own signature is `check_digest`'s.

    Raises:
        Invalid: fewer than `required` valid cosignatures, or no checkpoint.
    """
    note, _ = digest_checkpoint(digest)
    valid = valid_cosigners(note, witness_keys)
    if len(valid) < required:
        raise TooFewWitnesses(tuple(k.name for k in valid), required)
    return valid


def check_inclusion(
    digest: Digest, proof: InclusionProof, public_keys: Mapping[str, bytes]
) -> None:
    """Check the digest, the event's chain hash and the audit path to the digest's root.

    Raises:
        Invalid: what failed first.
    """
    check_digest(digest, public_keys)
    if (proof.tree_size, proof.root) != (digest.tree_size, digest.root):
        raise ProofMismatch(
            f"the proof is for the tree of {proof.tree_size} events with root "
            f"{proof.root.hex()}, the digest for {digest.tree_size} events with root "
            f"{digest.root.hex()}",
            (proof.tree_size, proof.root),
            (digest.tree_size, digest.root),
        )
    event = proof.event
    recomputed = event.recomputed_hash()
    if recomputed != event.hash:
        raise EventAltered(event.position, event.stream_id, event.version, event.hash, recomputed)
    if not verify_inclusion(
        leaf_hash(event.hash), proof.leaf_index, digest.tree_size, proof.audit_path, digest.root
    ):
        raise AuditPathMismatch(
            proof.leaf_index,
            f"the audit path does not lead from the event's leaf (index {proof.leaf_index}) to "
            f"the digest's root: the event or the proof was altered",
        )


def check_consistency(
    old: Digest, new: Digest, proof: ConsistencyProof, public_keys: Mapping[str, bytes]
) -> None:
    """Check both digests and that the newer tree extends the older one.

    Raises:
        Invalid: what failed first.
    """
    for name, digest in (("old", old), ("new", new)):
        try:
            check_digest(digest, public_keys)
        except Invalid as e:
            raise DigestInvalid(name, e) from e
    if old.tree_size > new.tree_size:
        raise NotConsistent(
            old.tree_size,
            new.tree_size,
            f"the old digest covers {old.tree_size} events, more than the new one's "
            f"{new.tree_size}",
        )
    for name, size, root, digest in (
        ("old", proof.old_size, proof.old_root, old),
        ("new", proof.new_size, proof.new_root, new),
    ):
        if (size, root) != (digest.tree_size, digest.root):
            raise ProofMismatch(
                f"the proof's {name} tree does not match the {name} digest",
                (size, root),
                (digest.tree_size, digest.root),
            )
    if not verify_consistency(old.tree_size, new.tree_size, old.root, new.root, proof.proof):
        raise HistoryRewritten(
            old.tree_size,
            new.tree_size,
            f"the new tree ({new.tree_size} events) does not extend the old one "
            f"({old.tree_size} events): history was rewritten, or the proof was altered",
        )


def read_tile_directory(directory: Path, size: int) -> dict[tuple[int, int], bytes]:
    """Every tile of the tree of `size` leaves from a tlog-tiles directory
    (`signoff ledger tiles export`), by (level, index).

    Raises:
        Invalid: a tile is missing or not of its width.
    """
    tiles: dict[tuple[int, int], bytes] = {}
    for level, index, width in tiles_of(size):
        name = tile_path(level, index, width)
        path = directory / name
        try:
            hashes = path.read_bytes()
        except OSError as e:
            raise TileUnreadable(name, f"tile {name} cannot be read: {e}") from e
        if len(hashes) != width * HASH_SIZE:
            raise TileUnreadable(name, f"tile {name} is not {width} hashes")
        tiles[(level, index)] = hashes
    return tiles


def check_tiles(
    digest: Digest, tiles: Mapping[tuple[int, int], bytes], public_keys: Mapping[str, bytes]
) -> None:
    """Check the digest, that every full tile's root is its entry one level up, and that the
    tiles hash to the digest's root: then every hash in them is the digest's tree's.

    Raises:
        Invalid: what failed first.
    """
    check_digest(digest, public_keys)
    for (level, index), hashes in sorted(tiles.items()):
        if len(hashes) != TILE_BYTES:
            continue
        above = tiles.get((level + 1, index // TILE_WIDTH), b"")
        at = (index % TILE_WIDTH) * HASH_SIZE
        if above[at : at + HASH_SIZE] != tile_root(hashes):
            raise TileAltered(
                tile_path(level, index), f"{level + 1}/{index // TILE_WIDTH}", index % TILE_WIDTH
            )
    try:
        root = TileReader(digest.tree_size, tiles).root()
    except LookupError as e:
        raise TileUnreadable("?", f"the tiles lack hashes of the digest's tree: {e}") from e
    if root != digest.root:
        raise RootMismatch(
            digest.root,
            root,
            f"the tiles hash to root {root.hex()}, the digest says {digest.root.hex()}: the "
            "tiles or the digest were altered",
        )


def inclusion_from_tiles(
    digest: Digest, tiles: Mapping[tuple[int, int], bytes], proof: InclusionProof
) -> None:
    """Check an inclusion proof's event against the tiles: its leaf is the tiles' leaf at its
    index, and the audit path the tiles give leads to the digest's root (`check_tiles` first).

    Raises:
        Invalid: it does not.
    """
    reader = TileReader(digest.tree_size, tiles)
    index = proof.leaf_index
    if index >= digest.tree_size or reader.leaf(index) != leaf_hash(proof.event.hash):
        raise AuditPathMismatch(index, f"leaf {index} of the tiles is not the event's hash")
    path = inclusion_path(index, digest.tree_size, reader.subtree)
    if not verify_inclusion(
        leaf_hash(proof.event.hash), index, digest.tree_size, path, digest.root
    ):
        raise AuditPathMismatch(
            index, f"the tiles' audit path of leaf {index} does not lead to the root"
        )
    if tuple(path) != proof.audit_path:
        raise AuditPathMismatch(index, f"the proof's audit path of leaf {index} is not the tiles'")


def consistency_from_tiles(
    old: Digest, new: Digest, tiles: Mapping[tuple[int, int], bytes]
) -> None:
    """Check that the older digest's root is the root of the tiles' first `old.tree_size`
    leaves and that the consistency proof the tiles give verifies.

    Raises:
        Invalid: it does not.
    """
    if old.tree_size > new.tree_size:
        raise NotConsistent(
            old.tree_size,
            new.tree_size,
            f"the old digest covers {old.tree_size} events, more than {new.tree_size}",
        )
    reader = TileReader(new.tree_size, tiles)
    old_root = reader.subtree(0, old.tree_size) if old.tree_size else EMPTY_ROOT
    proof = consistency_path(old.tree_size, new.tree_size, reader.subtree)
    if old_root != old.root or not verify_consistency(
        old.tree_size, new.tree_size, old.root, new.root, proof
    ):
        raise RootMismatch(
            old.root,
            old_root,
            f"the tiles' first {old.tree_size} leaves do not hash to the old digest's root "
            f"{old.root.hex()}: history was rewritten",
        )
