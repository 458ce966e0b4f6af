"""Check Signoff's signed digests and proofs with nothing but the public keys: no database.

    python -m ledger.audit.verifier digest DIGEST --public-keys KEYS [--witness-key VKEY ...
        --witnesses N]
    python -m ledger.audit.verifier inclusion DIGEST PROOF --public-keys KEYS
    python -m ledger.audit.verifier consistency OLD NEW PROOF --public-keys KEYS
    python -m ledger.audit.verifier tiles DIR --public-keys KEYS [--inclusion PROOF] [--old OLD]

KEYS is the output of `signoff keys export-public`. Exit 0: valid; 1: invalid (the reason is
printed); 2: usage error (bad arguments, unreadable files, malformed KEYS).

This module defines the documents it checks, so an auditor needs to trust only it,
`ledger/canonical.py`, `ledger/audit/merkle.py`, `ledger/audit/checkpoint.py` and
`ledger/audit/tiles.py` (stdlib and
`cryptography` otherwise).

The journal's Merkle tree (RFC 6962 hashing, `ledger.audit.merkle`) has one leaf per event, in the
journal's global order (transaction id, position) below the horizon, the order `Journal.read_all`
yields. Leaf data is the event's 32-byte chain hash, `SHA-256(previous hash of its stream ||
canonical bytes)`, so a leaf commits to the event's content and to its stream's history.

Digest (JSON, `signoff_digest: 1`): `tree_size`, `root` (hex), `last_position` (the position of
the last leaf; 0 when empty), `taken_at`, `key_id`, `algorithm` ("Ed25519") and `signature`
(base64). The signature is over the message: the tag `signoff.digest.v1` followed by five fields,
each a 4-byte big-endian length and its UTF-8 text: tree size (decimal), root (64 lowercase hex
digits), last position (decimal), taken-at (`YYYY-MM-DDTHH:MM:SS.ffffffZ`) and the key id.
A digest may also carry `checkpoint`: the same tree head as a C2SP checkpoint (signed note text,
`ledger.audit.checkpoint`) signed by the same key under the log's origin name, plus any witness
cosignatures. The digest's own signature does not cover it, so cosignatures can be appended;
`check_digest` checks that it names the same tree and carries the key's valid signature, and
`check_witnesses` counts its valid cosignatures by trusted witnesses.

Exported event (JSON object; `ledger.audit.digest.export_event` makes it, for `ledger export` too):
position, txid, stream_id, version, type, actor, recorded_at (canonical text), data (the
canonical JSON text, verbatim), hash and prev_hash (hex), and tag_version (which tag starts
the canonical bytes, `ledger.canonical.EVENT_TAGS`: 2; a document without it, or with another,
is malformed). Only stream id, version, type, actor, recorded_at and data are hashed, under the
tag of tag_version, so an altered tag_version does not verify; position and txid are the
database's bookkeeping and are not covered by any hash.

Tiles (`signoff ledger tiles export DIR`): the tree in the C2SP tlog-tiles layout of
`ledger.audit.tiles` (`tile/<L>/<N>`, partial tiles `.p/<W>`, raw 32-byte hashes) and the signed
`digest.json`; `tiles` checks that every full tile's root is its entry a level up and that they
hash to the digest's root, then proofs against them, with no database.

Inclusion proof (`signoff_inclusion_proof: 1`): tree_size, root, leaf_index, audit_path (hex,
the leaf's sibling first) and the exported event. Consistency proof
(`signoff_consistency_proof: 1`): old_size, old_root, new_size, new_root, proof (hex).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import struct
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ..canonical import EVENT_TAGS, chain_hash, event_bytes, format_time
from .checkpoint import (
    ED25519,
    Checkpoint,
    MalformedNote,
    SignedNote,
    VerifierKey,
    parse_keys,
    signed_by,
    valid_cosigners,
)
from .merkle import (
    EMPTY_ROOT,
    HASH_SIZE,
    consistency_path,
    inclusion_path,
    leaf_hash,
    verify_consistency,
    verify_inclusion,
)
from .tiles import TILE_BYTES, TILE_WIDTH, TileReader, tile_path, tile_root, tiles_of

__all__ = [
    "DIGEST_TAG",
    "ConsistencyProof",
    "Digest",
    "ExportedEvent",
    "InclusionProof",
    "Invalid",
    "MalformedDocument",
    "check_consistency",
    "check_digest",
    "check_inclusion",
    "check_tiles",
    "check_witnesses",
    "consistency_from_tiles",
    "digest_checkpoint",
    "digest_message",
    "inclusion_from_tiles",
    "load_public_keys",
    "main",
    "read_tile_directory",
]

DIGEST_TAG = b"signoff.digest.v1"
_LENGTH = struct.Struct(">I")
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
_T = TypeVar("_T")


class Invalid(Exception):
    """A digest or proof does not verify; the message says what failed."""


class MalformedDocument(Invalid, ValueError):
    """A document is not of the expected shape (missing field, bad hex, wrong kind)."""


# -- documents -----------------------------------------------------------------------------------


def digest_message(
    tree_size: int, root: bytes, last_position: int, taken_at: datetime, key_id: str
) -> bytes:
    """The bytes a digest's signature covers (see the module docstring)."""
    parts = [DIGEST_TAG]
    fields = (str(tree_size), root.hex(), str(last_position), format_time(taken_at), key_id)
    for text in fields:
        encoded = text.encode("utf-8")
        parts += (_LENGTH.pack(len(encoded)), encoded)
    return b"".join(parts)


@dataclass(frozen=True, slots=True)
class Digest:
    """A signed commitment to the first `tree_size` events of the journal."""

    tree_size: int
    root: bytes
    last_position: int
    taken_at: datetime
    key_id: str
    signature: bytes
    checkpoint: str | None = None
    """The signed note of the same tree head (C2SP tlog-checkpoint), when the log has an
    origin; cosignatures are appended to it."""

    def message(self) -> bytes:
        return digest_message(
            self.tree_size, self.root, self.last_position, self.taken_at, self.key_id
        )

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "signoff_digest": 1,
            "tree_size": self.tree_size,
            "root": self.root.hex(),
            "last_position": self.last_position,
            "taken_at": format_time(self.taken_at),
            "key_id": self.key_id,
            "algorithm": "Ed25519",
            "signature": base64.b64encode(self.signature).decode(),
        }
        if self.checkpoint is not None:
            doc["checkpoint"] = self.checkpoint
        return doc

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    @classmethod
    def from_dict(cls, doc: Any) -> Digest:
        doc = _kind(doc, "signoff_digest", "digest")
        if _text(doc, "algorithm") != "Ed25519":
            raise MalformedDocument(f"digest: unknown algorithm {doc['algorithm']!r}")
        return cls(
            _count(doc, "tree_size"),
            _hash(doc, "root"),
            _count(doc, "last_position"),
            _time(doc, "taken_at"),
            _text(doc, "key_id"),
            _base64(doc, "signature"),
            None if doc.get("checkpoint") is None else _text(doc, "checkpoint"),
        )

    @classmethod
    def from_json(cls, text: str) -> Digest:
        """Raises: MalformedDocument."""
        return cls.from_dict(_parse(text, "digest"))


@dataclass(frozen=True, slots=True)
class ExportedEvent:
    """One journal event as exported for auditors: enough to recompute its chain hash."""

    position: int
    txid: int
    stream_id: str
    version: int
    type: str
    actor: str
    recorded_at: str
    data: str
    hash: bytes
    prev_hash: bytes
    tag_version: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "txid": self.txid,
            "stream_id": self.stream_id,
            "version": self.version,
            "type": self.type,
            "actor": self.actor,
            "recorded_at": self.recorded_at,
            "data": self.data,
            "hash": self.hash.hex(),
            "prev_hash": self.prev_hash.hex(),
            "tag_version": self.tag_version,
        }

    @classmethod
    def from_dict(cls, doc: Any) -> ExportedEvent:
        if not isinstance(doc, dict):
            raise MalformedDocument("event: not a JSON object")
        _time(doc, "recorded_at")  # must be canonical text, or the bytes would not match
        return cls(
            _count(doc, "position"),
            _count(doc, "txid"),
            _text(doc, "stream_id"),
            _count(doc, "version"),
            _text(doc, "type"),
            _text(doc, "actor"),
            _text(doc, "recorded_at"),
            _text(doc, "data"),
            _hash(doc, "hash"),
            _hash(doc, "prev_hash"),
            _tag_version(doc),
        )

    def canonical_bytes(self) -> bytes:
        recorded_at = datetime.strptime(self.recorded_at, _TIME_FORMAT).replace(tzinfo=UTC)
        return event_bytes(
            self.stream_id,
            self.version,
            self.type,
            self.actor,
            recorded_at,
            self.data,
            tag_version=self.tag_version,
        )

    def recomputed_hash(self) -> bytes:
        """The chain hash of these fields after `prev_hash`: equals `hash` unless altered."""
        return chain_hash(self.prev_hash, self.canonical_bytes())


@dataclass(frozen=True, slots=True)
class InclusionProof:
    """The audit path of one event's leaf in a digest's tree, and the event itself."""

    tree_size: int
    root: bytes
    leaf_index: int
    audit_path: tuple[bytes, ...]
    event: ExportedEvent

    def to_dict(self) -> dict[str, Any]:
        return {
            "signoff_inclusion_proof": 1,
            "tree_size": self.tree_size,
            "root": self.root.hex(),
            "leaf_index": self.leaf_index,
            "audit_path": [h.hex() for h in self.audit_path],
            "event": self.event.to_dict(),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> InclusionProof:
        """Raises: MalformedDocument."""
        doc = _kind(_parse(text, "inclusion proof"), "signoff_inclusion_proof", "inclusion proof")
        return cls(
            _count(doc, "tree_size"),
            _hash(doc, "root"),
            _count(doc, "leaf_index"),
            _hashes(doc, "audit_path"),
            ExportedEvent.from_dict(doc.get("event")),
        )


@dataclass(frozen=True, slots=True)
class ConsistencyProof:
    """Proof that the tree of `old_size` leaves is a prefix of the tree of `new_size`."""

    old_size: int
    old_root: bytes
    new_size: int
    new_root: bytes
    proof: tuple[bytes, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "signoff_consistency_proof": 1,
            "old_size": self.old_size,
            "old_root": self.old_root.hex(),
            "new_size": self.new_size,
            "new_root": self.new_root.hex(),
            "proof": [h.hex() for h in self.proof],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> ConsistencyProof:
        """Raises: MalformedDocument."""
        doc = _parse(text, "consistency proof")
        doc = _kind(doc, "signoff_consistency_proof", "consistency proof")
        return cls(
            _count(doc, "old_size"),
            _hash(doc, "old_root"),
            _count(doc, "new_size"),
            _hash(doc, "new_root"),
            _hashes(doc, "proof"),
        )


def load_public_keys(text: str) -> dict[str, bytes]:
    """The Ed25519 public keys, by key id, of a `signoff keys export-public` document.

    Keys of every state count: a retired signing key still verifies what it signed.

    Raises:
        MalformedDocument: not such a document.
    """
    doc = _kind(_parse(text, "public keys"), "signoff_public_keys", "public keys")
    keys = doc.get("keys")
    if not isinstance(keys, list):
        raise MalformedDocument("public keys: `keys` is not a list")
    found: dict[str, bytes] = {}
    for entry in keys:
        if not isinstance(entry, dict) or entry.get("algorithm") != "Ed25519":
            continue  # another algorithm: not ours to use
        raw = _base64(entry, "public_key")
        if len(raw) != 32:
            raise MalformedDocument(f"public key {entry.get('key_id')!r} is not 32 bytes")
        found[_text(entry, "key_id")] = raw
    return found


# -- checks --------------------------------------------------------------------------------------


def check_digest(digest: Digest, public_keys: Mapping[str, bytes]) -> None:
    """Check the digest's signature under the public key it names.

    Raises:
        Invalid: unknown key or bad signature.
    """
    raw = public_keys.get(digest.key_id)
    if raw is None:
        known = ", ".join(sorted(public_keys)) or "none"
        raise Invalid(
            f"the digest is signed by key {digest.key_id}, which is not among the "
            f"public keys ({known})"
        )
    try:
        Ed25519PublicKey.from_public_bytes(raw).verify(digest.signature, digest.message())
    except (InvalidSignature, ValueError) as e:
        raise Invalid(
            f"the digest's signature does not verify under key {digest.key_id}: the digest "
            "was altered or not signed by that key"
        ) from e
    if digest.checkpoint is not None:
        note, checkpoint = digest_checkpoint(digest)
        if (checkpoint.tree_size, checkpoint.root) != (digest.tree_size, digest.root):
            raise Invalid(
                f"the checkpoint is of {checkpoint.tree_size} events with root "
                f"{checkpoint.root.hex()}, the digest of {digest.tree_size} with root "
                f"{digest.root.hex()}"
            )
        if not signed_by(note, VerifierKey(checkpoint.origin, ED25519, raw)):
            raise Invalid(
                f"the checkpoint carries no valid signature of key {digest.key_id} under the "
                f"name {checkpoint.origin!r}: it was altered or not signed by that key"
            )


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
        names = ", ".join(k.name for k in valid) or "none"
        raise Invalid(
            f"{len(valid)} valid witness cosignature(s) of {required} required (valid: {names})"
        )
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
        raise Invalid(
            f"the proof is for the tree of {proof.tree_size} events with root "
            f"{proof.root.hex()}, the digest for {digest.tree_size} events with root "
            f"{digest.root.hex()}"
        )
    event = proof.event
    recomputed = event.recomputed_hash()
    if recomputed != event.hash:
        raise Invalid(
            f"event at position {event.position} (stream {event.stream_id!r} version "
            f"{event.version}): its fields hash to {recomputed.hex()}, not to its recorded hash "
            f"{event.hash.hex()}: the event was altered"
        )
    if not verify_inclusion(
        leaf_hash(event.hash), proof.leaf_index, digest.tree_size, proof.audit_path, digest.root
    ):
        raise Invalid(
            f"the audit path does not lead from the event's leaf (index {proof.leaf_index}) to "
            f"the digest's root: the event or the proof was altered"
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
            raise Invalid(f"{name} digest: {e}") from e
    if old.tree_size > new.tree_size:
        raise Invalid(
            f"the old digest covers {old.tree_size} events, more than the new one's {new.tree_size}"
        )
    for name, size, root, digest in (
        ("old", proof.old_size, proof.old_root, old),
        ("new", proof.new_size, proof.new_root, new),
    ):
        if (size, root) != (digest.tree_size, digest.root):
            raise Invalid(f"the proof's {name} tree does not match the {name} digest")
    if not verify_consistency(old.tree_size, new.tree_size, old.root, new.root, proof.proof):
        raise Invalid(
            f"the new tree ({new.tree_size} events) does not extend the old one "
            f"({old.tree_size} events): history was rewritten, or the proof was altered"
        )


def read_tile_directory(directory: Path, size: int) -> dict[tuple[int, int], bytes]:
    """Every tile of the tree of `size` leaves from a tlog-tiles directory
    (`signoff ledger tiles export`), by (level, index).

    Raises:
        Invalid: a tile is missing or not of its width.
    """
    tiles: dict[tuple[int, int], bytes] = {}
    for level, index, width in tiles_of(size):
        path = directory / tile_path(level, index, width)
        try:
            hashes = path.read_bytes()
        except OSError as e:
            raise Invalid(f"tile {tile_path(level, index, width)} cannot be read: {e}") from e
        if len(hashes) != width * HASH_SIZE:
            raise Invalid(f"tile {tile_path(level, index, width)} is not {width} hashes")
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
            raise Invalid(
                f"tile {tile_path(level, index)}: its root is not entry {index % TILE_WIDTH} "
                f"of tile {level + 1}/{index // TILE_WIDTH}: the tiles were altered"
            )
    try:
        root = TileReader(digest.tree_size, tiles).root()
    except LookupError as e:
        raise Invalid(f"the tiles lack hashes of the digest's tree: {e}") from e
    if root != digest.root:
        raise Invalid(
            f"the tiles hash to root {root.hex()}, the digest says {digest.root.hex()}: the "
            "tiles or the digest were altered"
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
        raise Invalid(f"leaf {index} of the tiles is not the event's hash")
    path = inclusion_path(index, digest.tree_size, reader.subtree)
    if not verify_inclusion(
        leaf_hash(proof.event.hash), index, digest.tree_size, path, digest.root
    ):
        raise Invalid(f"the tiles' audit path of leaf {index} does not lead to the root")
    if tuple(path) != proof.audit_path:
        raise Invalid(f"the proof's audit path of leaf {index} is not the tiles'")


def consistency_from_tiles(
    old: Digest, new: Digest, tiles: Mapping[tuple[int, int], bytes]
) -> None:
    """Check that the older digest's root is the root of the tiles' first `old.tree_size`
    leaves and that the consistency proof the tiles give verifies.

    Raises:
        Invalid: it does not.
    """
    if old.tree_size > new.tree_size:
        raise Invalid(f"the old digest covers {old.tree_size} events, more than {new.tree_size}")
    reader = TileReader(new.tree_size, tiles)
    old_root = reader.subtree(0, old.tree_size) if old.tree_size else EMPTY_ROOT
    proof = consistency_path(old.tree_size, new.tree_size, reader.subtree)
    if old_root != old.root or not verify_consistency(
        old.tree_size, new.tree_size, old.root, new.root, proof
    ):
        raise Invalid(
            f"the tiles' first {old.tree_size} leaves do not hash to the old digest's root "
            f"{old.root.hex()}: history was rewritten"
        )


# -- parsing helpers -----------------------------------------------------------------------------


def _parse(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as e:
        raise MalformedDocument(f"{what}: not JSON: {e}") from e


def _kind(doc: Any, marker: str, what: str) -> dict[str, Any]:
    if not isinstance(doc, dict) or doc.get(marker) != 1:
        raise MalformedDocument(f"not a Signoff {what} (no `{marker}: 1`)")
    return doc


def _field(doc: dict[str, Any], name: str, kind: type) -> Any:
    value = doc.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise MalformedDocument(f"`{name}` is missing or not a {kind.__name__}")
    return value


def _count(doc: dict[str, Any], name: str) -> int:
    value: int = _field(doc, name, int)
    if value < 0:
        raise MalformedDocument(f"`{name}` is negative")
    return value


def _tag_version(doc: dict[str, Any]) -> int:
    value = _count(doc, "tag_version")
    if value not in EVENT_TAGS:
        known = ", ".join(map(str, EVENT_TAGS))
        raise MalformedDocument(f"`tag_version` {value} is unknown (known: {known})")
    return value


def _text(doc: dict[str, Any], name: str) -> str:
    value: str = _field(doc, name, str)
    return value


def _hash(doc: dict[str, Any], name: str) -> bytes:
    return _hex(_text(doc, name), name)


def _hex(text: str, name: str) -> bytes:
    try:
        value = bytes.fromhex(text)
    except ValueError as e:
        raise MalformedDocument(f"`{name}` is not hex") from e
    if len(value) != HASH_SIZE:
        raise MalformedDocument(f"`{name}` is not a {HASH_SIZE}-byte hash")
    return value


def _hashes(doc: dict[str, Any], name: str) -> tuple[bytes, ...]:
    values = _field(doc, name, list)
    if not all(isinstance(v, str) for v in values):
        raise MalformedDocument(f"`{name}` is not a list of hex strings")
    return tuple(_hex(v, name) for v in values)


def _base64(doc: dict[str, Any], name: str) -> bytes:
    try:
        return base64.b64decode(_text(doc, name), validate=True)
    except binascii.Error as e:
        raise MalformedDocument(f"`{name}` is not base64") from e


def _time(doc: dict[str, Any], name: str) -> datetime:
    text = _text(doc, name)
    try:
        moment = datetime.strptime(text, _TIME_FORMAT).replace(tzinfo=UTC)
    except ValueError as e:
        raise MalformedDocument(f"`{name}` is not a time like 2026-01-31T12:00:00.000000Z") from e
    if format_time(moment) != text:
        raise MalformedDocument(f"`{name}` is not in canonical form")
    return moment


# -- command line --------------------------------------------------------------------------------


class _UsageError(Exception):
    pass


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise _UsageError(f"cannot read {path}: {e}") from e


def _run(args: argparse.Namespace) -> str:
    """Check what the arguments name; return what was shown valid.

    Raises:
        Invalid: it is not valid.
        _UsageError: a file could not be read, or KEYS is malformed.
    """
    try:
        keys = load_public_keys(_read(args.public_keys))
    except MalformedDocument as e:
        raise _UsageError(f"{args.public_keys}: {e}") from e
    if args.command == "digest":
        witness_keys, required = _witness_options(args)
        digest = _document(Digest.from_json, args.digest)
        check_digest(digest, keys)
        shown = (
            f"valid: digest of {digest.tree_size} events (last position "
            f"{digest.last_position}), root {digest.root.hex()}, signed by {digest.key_id} at "
            f"{format_time(digest.taken_at)}"
        )
        if required:
            try:
                valid = check_witnesses(digest, witness_keys, required)
            except MalformedDocument as e:
                raise Invalid(f"{args.digest}: {e}") from e
            shown += f"; cosigned by {len(valid)} of {required} required witnesses"
        return shown
    if args.command == "inclusion":
        digest = _document(Digest.from_json, args.digest)
        proof = _document(InclusionProof.from_json, args.proof)
        check_inclusion(digest, proof, keys)
        event = proof.event
        return (
            f"valid: the event of stream {event.stream_id!r} version {event.version} "
            f"({event.type}, by {event.actor} at {event.recorded_at}) is leaf "
            f"{proof.leaf_index} of the {digest.tree_size}-event journal signed by "
            f"{digest.key_id} at {format_time(digest.taken_at)}"
        )
    if args.command == "tiles":
        return _tiles(args, keys)
    old = _document(Digest.from_json, args.old)
    new = _document(Digest.from_json, args.new)
    consistency = _document(ConsistencyProof.from_json, args.proof)
    check_consistency(old, new, consistency, keys)
    return (
        f"valid: the journal of {new.tree_size} events (root {new.root.hex()}) extends the "
        f"journal of {old.tree_size} events (root {old.root.hex()}); both signatures verify"
    )


def _witness_options(args: argparse.Namespace) -> tuple[list[VerifierKey], int]:
    """The witness keys and how many must have cosigned (default: all of them)."""
    try:
        keys = parse_keys(args.witness_key)
    except MalformedNote as e:
        raise _UsageError(f"--witness-key: {e}") from e
    required = len(keys) if args.witnesses is None else args.witnesses
    if required > len(keys):
        raise _UsageError(
            f"--witnesses {required}: only {len(keys)} --witness-key given, so it cannot be met"
        )
    return keys, required


def _tiles(args: argparse.Namespace, keys: Mapping[str, bytes]) -> str:
    directory: Path = args.directory
    digest = _document(Digest.from_json, args.digest or directory / "digest.json")
    tiles = read_tile_directory(directory, digest.tree_size)
    check_tiles(digest, tiles, keys)
    shown = [
        f"valid: {len(tiles)} tiles of {directory} hash to the root {digest.root.hex()} of the "
        f"{digest.tree_size}-event digest signed by {digest.key_id}"
    ]
    for path in args.inclusion:
        proof = _document(InclusionProof.from_json, path)
        check_inclusion(digest, proof, keys)
        inclusion_from_tiles(digest, tiles, proof)
        shown.append(f"valid: {path}: leaf {proof.leaf_index} is in the tiles")
    if args.old is not None:
        old = _document(Digest.from_json, args.old)
        check_digest(old, keys)
        consistency_from_tiles(old, digest, tiles)
        shown.append(f"valid: the tiles extend the {old.tree_size}-event digest {args.old}")
    return "\n".join(shown)


def _document(parse: Callable[[str], _T], path: Path) -> _T:
    try:
        return parse(_read(path))
    except MalformedDocument as e:
        raise Invalid(f"{path}: {e}") from e


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ledger.audit.verifier",
        description="Check Signoff digests and proofs offline, with only the public keys "
        "(`signoff keys export-public`). Exit 0: valid, 1: invalid, 2: usage error.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    digest = commands.add_parser("digest", help="check a digest's signature")
    digest.add_argument("digest", type=Path, metavar="DIGEST")
    digest.add_argument(
        "--witness-key",
        action="append",
        default=[],
        metavar="VKEY",
        help="a trusted witness's vkey (repeatable)",
    )
    digest.add_argument(
        "--witnesses",
        type=_count_argument,
        metavar="N",
        help="how many of the --witness-key witnesses must have cosigned (default: all)",
    )
    inclusion = commands.add_parser("inclusion", help="check an event's inclusion proof")
    inclusion.add_argument("digest", type=Path, metavar="DIGEST")
    inclusion.add_argument("proof", type=Path, metavar="PROOF")
    consistency = commands.add_parser("consistency", help="check that NEW extends OLD")
    consistency.add_argument("old", type=Path, metavar="OLD")
    consistency.add_argument("new", type=Path, metavar="NEW")
    consistency.add_argument("proof", type=Path, metavar="PROOF")
    tiles = commands.add_parser(
        "tiles", help="check an exported tile directory (`signoff ledger tiles export`)"
    )
    tiles.add_argument("directory", type=Path, metavar="DIR")
    tiles.add_argument(
        "--digest", type=Path, metavar="DIGEST", help="the digest to check (DIR/digest.json)"
    )
    tiles.add_argument(
        "--inclusion",
        type=Path,
        action="append",
        default=[],
        metavar="PROOF",
        help="also check this inclusion proof's event against the tiles (repeatable)",
    )
    tiles.add_argument(
        "--old", type=Path, metavar="DIGEST", help="also check the tiles extend this digest"
    )
    for command in (digest, inclusion, consistency, tiles):
        command.add_argument(
            "--public-keys",
            type=Path,
            required=True,
            metavar="KEYS",
            help="the JSON of `signoff keys export-public`",
        )
        command.add_argument("--json", action="store_true", help="print JSON for machines")
    return parser


def _count_argument(text: str) -> int:
    if not text.isdecimal():
        raise argparse.ArgumentTypeError(f"{text!r} is not a count (0 or more)")
    return int(text)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the verifier; return its exit code."""
    args = _parser().parse_args(argv)
    try:
        shown = _run(args)
    except _UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Invalid as e:
        _say(args, False, f"INVALID: {e}")
        return 1
    _say(args, True, shown)
    return 0


def _say(args: argparse.Namespace, valid: bool, text: str) -> None:
    if args.json:
        print(json.dumps({"valid": valid, "message": text}))
    else:
        print(text)


if __name__ == "__main__":
    sys.exit(main())
