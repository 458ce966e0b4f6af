"""The documents the offline verifier reads: signed digests, exported events, inclusion and
consistency proofs, and the public keys of `signoff keys export-public`, with their parsing.

Their format is specified in `docs/pages/audit/formats.md`. Standard library and `cryptography`
only.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ...canonical import EVENT_TAGS, chain_hash, event_bytes, format_time
from ..merkle import HASH_SIZE
from .failures import MalformedDocument

__all__ = [
    "DIGEST_TAG",
    "ConsistencyProof",
    "Digest",
    "ExportedEvent",
    "InclusionProof",
    "digest_message",
    "load_public_keys",
]

DIGEST_TAG = b"signoff.digest.v1"
_LENGTH = struct.Struct(">I")
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


# -- documents -----------------------------------------------------------------------------------


def digest_message(
    tree_size: int, root: bytes, last_position: int, taken_at: datetime, key_id: str
) -> bytes:
    """The bytes a digest's signature covers (`docs/pages/audit/formats.md`, Digest)."""
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
    """One journal event as exported for auditors: enough to recompute its chain hash. `login`
    is the database login that wrote it, which tag 3's hash covers; tag 2 has none (None)."""

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
    login: str | None

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
            "login": self.login,
        }

    @classmethod
    def from_dict(cls, doc: Any) -> ExportedEvent:
        if not isinstance(doc, dict):
            raise MalformedDocument("event: not a JSON object")
        _time(doc, "recorded_at")  # must be canonical text, or the bytes would not match
        tag_version = _tag_version(doc)
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
            tag_version,
            _login(doc, tag_version),
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
            login=self.login,
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


def _login(doc: dict[str, Any], tag_version: int) -> str | None:
    """The login of a tag-3 event, which its hash covers; tag 2 has none (absent or null)."""
    if tag_version == 2:
        if doc.get("login") is not None:
            raise MalformedDocument("`login` is given for an event of tag version 2 (none has one)")
        return None
    login = _text(doc, "login")
    if not login:
        raise MalformedDocument("`login` is empty")
    return login


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
