"""Checkpoints of the journal's Merkle tree as C2SP signed notes, and witness cosignatures.

Formats (standard library and `cryptography` only, like the verifier that uses them):

- signed note (c2sp.org/signed-note): a text ending in a newline, a blank line, then signature
  lines `— <key name> <base64(4-byte key id || signature)>`. An Ed25519 key's id is the first 4
  bytes of SHA-256(key name || 0x0A || 0x01 || 32-byte public key). Verifier keys (vkeys) are
  `<name>+<hex key id>+<base64(type byte || public key)>`; signer keys as golang.org/x/mod's
  sumdb/note writes them, `PRIVATE+KEY+<name>+<hex key id>+<base64(type byte || seed)>`.
- checkpoint (c2sp.org/tlog-checkpoint): the note text is the origin line, the tree size in
  decimal, the base64 root hash (RFC 6962), then optional extension lines. The log signs it with
  its key named after the origin.
- cosignature (c2sp.org/tlog-cosignature, `cosignature/v1`): a note signature of type 0x04 whose
  bytes are an 8-byte big-endian POSIX timestamp and the Ed25519 signature of
  `cosignature/v1\\ntime <timestamp>\\n` followed by the checkpoint's text.

Verification follows signed-note: a signature line counts only when both its key name and key
id are those of a trusted key; unknown lines are ignored.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from .merkle import HASH_SIZE

__all__ = [
    "COSIGNATURE_V1",
    "ED25519",
    "EM_DASH",
    "Checkpoint",
    "MalformedNote",
    "NoteSignature",
    "SignedNote",
    "SignerKey",
    "VerifierKey",
    "check_key_name",
    "cosign",
    "cosignature_message",
    "cosigned_by",
    "key_id",
    "parse_keys",
    "sign_checkpoint",
    "signed_by",
    "valid_cosigners",
]

ED25519 = 0x01
"""Signature type of plain Ed25519 note signatures (the log's)."""
COSIGNATURE_V1 = 0x04
"""Signature type of timestamped Ed25519 checkpoint cosignatures (a witness's)."""

EM_DASH = "\u2014"
MAX_SIGNATURES = 64  # signed-note asks verifiers to accept at least 16
MAX_NOTE_CHARS = 64 * 1024
_COSIGNATURE_HEADER = "cosignature/v1\n"
_TIMESTAMP = struct.Struct(">Q")
_SIGNATURE_SIZE = 64
_KEY_SIZE = 32
# C0 controls but the newline: what signed-note forbids ("below U+0020").
_CONTROL = re.compile("[\x00-\x09\x0b-\x1f]")
_DECIMAL = re.compile(r"0|[1-9][0-9]*")


class MalformedNote(ValueError):
    """Text that is not a signed note, checkpoint or key of the expected form."""


def check_key_name(name: str) -> str:
    """`name` if it is a valid note key name (non-empty, no Unicode space, no '+').

    Raises:
        MalformedNote: it is not.
    """
    if not name or "+" in name or any(c.isspace() for c in name) or _CONTROL.search(name):
        raise MalformedNote(
            f"key name {name!r} must be non-empty, without spaces, '+' or control characters"
        )
    return name


def key_id(name: str, kind: int, public_key: bytes) -> bytes:
    """The 4-byte key id of signed-note: SHA-256(name || 0x0A || type || public key)[:4]."""
    return hashlib.sha256(name.encode() + b"\n" + bytes([kind]) + public_key).digest()[:4]


def _b64decode(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        raise MalformedNote(f"{what} is not base64") from e


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@dataclass(frozen=True, slots=True)
class VerifierKey:
    """A trusted public key: name, signature type (0x01 or 0x04) and Ed25519 public key."""

    name: str
    kind: int
    public_key: bytes

    @property
    def key_id(self) -> bytes:
        return key_id(self.name, self.kind, self.public_key)

    @property
    def vkey(self) -> str:
        """The key in vkey text form."""
        encoded = _b64(bytes([self.kind]) + self.public_key)
        return f"{self.name}+{self.key_id.hex()}+{encoded}"

    @classmethod
    def parse(cls, text: str) -> VerifierKey:
        """A vkey of an Ed25519 key (type 0x01) or of an Ed25519 cosigner (type 0x04).

        Raises:
            MalformedNote: not such a vkey, or its key id is not its key's.
        """
        name, _, rest = text.strip().partition("+")
        hex_id, _, encoded = rest.partition("+")
        check_key_name(name)
        raw = _b64decode(encoded, "the vkey's key")
        if len(hex_id) != 8 or len(raw) != 1 + _KEY_SIZE or raw[0] not in (ED25519, COSIGNATURE_V1):
            raise MalformedNote(
                f"{text.strip()!r} is not an Ed25519 vkey (name+keyid+base64(type||key))"
            )
        key = cls(name, raw[0], raw[1:])
        if key.key_id.hex() != hex_id.lower():
            raise MalformedNote(f"vkey {name}: key id {hex_id} is not its key's")
        return key

    def as_cosigner(self) -> VerifierKey:
        """The same key as a cosignature/v1 key (type 0x04), as transparency-dev's witness
        tooling reads a plain Ed25519 vkey given for a witness."""
        return VerifierKey(self.name, COSIGNATURE_V1, self.public_key)


@dataclass(frozen=True, slots=True)
class SignerKey:
    """A private Ed25519 key with its note key name and signature type."""

    name: str
    kind: int
    seed: bytes

    @classmethod
    def generate(cls, name: str, kind: int = COSIGNATURE_V1) -> SignerKey:
        check_key_name(name)
        return cls(name, kind, Ed25519PrivateKey.generate().private_bytes_raw())

    @property
    def private(self) -> Ed25519PrivateKey:
        return Ed25519PrivateKey.from_private_bytes(self.seed)

    @property
    def verifier(self) -> VerifierKey:
        return VerifierKey(self.name, self.kind, self.private.public_key().public_bytes_raw())

    @property
    def skey(self) -> str:
        """`PRIVATE+KEY+<name>+<hex key id>+<base64(type || seed)>`."""
        encoded = _b64(bytes([self.kind]) + self.seed)
        return f"PRIVATE+KEY+{self.name}+{self.verifier.key_id.hex()}+{encoded}"

    @classmethod
    def parse(cls, text: str) -> SignerKey:
        """Raises: MalformedNote: not a signer key of an Ed25519 key (type 0x01 or 0x04)."""
        parts = text.strip().split("+", 4)
        if len(parts) != 5 or parts[:2] != ["PRIVATE", "KEY"]:
            raise MalformedNote("not a signer key (PRIVATE+KEY+name+keyid+base64(type||seed))")
        name, hex_id, encoded = parts[2:]
        check_key_name(name)
        raw = _b64decode(encoded, "the signer key's seed")
        if len(raw) != 1 + _KEY_SIZE or raw[0] not in (ED25519, COSIGNATURE_V1):
            raise MalformedNote("the signer key is not an Ed25519 seed of type 0x01 or 0x04")
        key = cls(name, raw[0], raw[1:])
        if key.verifier.key_id.hex() != hex_id.lower():
            raise MalformedNote(f"signer key {name}: key id {hex_id} is not its key's")
        return key


@dataclass(frozen=True, slots=True)
class NoteSignature:
    """One signature line: key name, 4-byte key id and the signature bytes after it."""

    name: str
    key_id: bytes
    signature: bytes

    def line(self) -> str:
        return f"{EM_DASH} {self.name} {_b64(self.key_id + self.signature)}\n"


@dataclass(frozen=True, slots=True)
class SignedNote:
    """A note's text (ending in a newline) and its signature lines, in order."""

    text: str
    signatures: tuple[NoteSignature, ...]

    def render(self) -> str:
        return self.text + "\n" + "".join(s.line() for s in self.signatures)

    def adding(self, signature: NoteSignature) -> SignedNote:
        """The note with `signature` appended, or with it replacing a line of the same key."""
        others = tuple(
            s for s in self.signatures if (s.name, s.key_id) != (signature.name, signature.key_id)
        )
        return SignedNote(self.text, (*others, signature))

    @classmethod
    def parse(cls, note: str) -> SignedNote:
        """Raises: MalformedNote: not a signed note."""
        if len(note) > MAX_NOTE_CHARS:
            raise MalformedNote(f"the note is longer than {MAX_NOTE_CHARS} characters")
        if _CONTROL.search(note):
            raise MalformedNote("the note holds control characters other than newline")
        if not note.endswith("\n"):
            raise MalformedNote("the note does not end in a newline")
        split = note.rfind("\n\n")
        if split < 0:
            raise MalformedNote("the note has no blank line before its signatures")
        # Only U+000A ends a line: splitlines() would also split at U+2028 or U+0085.
        text, lines = note[: split + 1], note[split + 2 :].split("\n")[:-1]
        if not lines:
            raise MalformedNote("the note has no signature")
        if len(lines) > MAX_SIGNATURES:
            raise MalformedNote(f"the note has more than {MAX_SIGNATURES} signatures")
        return cls(text, tuple(_signature(line) for line in lines))


def _signature(line: str) -> NoteSignature:
    dash, _, rest = line.partition(" ")
    name, _, encoded = rest.partition(" ")
    if dash != EM_DASH or " " in encoded:
        raise MalformedNote(f"{line!r} is not a signature line (— name base64)")
    check_key_name(name)
    raw = _b64decode(encoded, f"the signature of {name}")
    if len(raw) < 5:
        raise MalformedNote(f"the signature of {name} is shorter than a key id and a signature")
    return NoteSignature(name, raw[:4], raw[4:])


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A tree head as a checkpoint's note text: origin, tree size, root, extension lines."""

    origin: str
    tree_size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def text(self) -> str:
        lines = [self.origin, str(self.tree_size), _b64(self.root), *self.extensions]
        return "".join(f"{line}\n" for line in lines)

    @classmethod
    def parse(cls, text: str) -> Checkpoint:
        """The checkpoint of a note's text.

        Raises:
            MalformedNote: not the text of a checkpoint.
        """
        lines = text.split("\n")
        if len(lines) < 4 or lines[-1] != "" or any(not line for line in lines[:-1]):
            raise MalformedNote(
                "a checkpoint's text is at least three non-empty lines: origin, size, root"
            )
        origin, size, root, *extensions = lines[:-1]
        if not _DECIMAL.fullmatch(size):
            raise MalformedNote(f"checkpoint tree size {size!r} is not a decimal number")
        raw = _b64decode(root, "the checkpoint's root hash")
        if len(raw) != HASH_SIZE:
            raise MalformedNote(f"the checkpoint's root hash is not {HASH_SIZE} bytes")
        return cls(origin, int(size), raw, tuple(extensions))


def sign_checkpoint(
    checkpoint: Checkpoint, public_key: bytes, sign: Callable[[bytes], bytes]
) -> str:
    """The checkpoint as a signed note: `sign` (Ed25519, of the key whose raw public key is
    `public_key`) signs its text, under the key name of its origin."""
    check_key_name(checkpoint.origin)
    text = checkpoint.text()
    line = NoteSignature(
        checkpoint.origin, key_id(checkpoint.origin, ED25519, public_key), sign(text.encode())
    )
    return SignedNote(text, (line,)).render()


def cosignature_message(text: str, timestamp: int) -> bytes:
    """What a cosignature/v1 signs: the header, the time line and the checkpoint's text."""
    return f"{_COSIGNATURE_HEADER}time {timestamp}\n{text}".encode()


def cosign(note: SignedNote, key: SignerKey, timestamp: int) -> NoteSignature:
    """The cosignature/v1 line of `key` on the note's checkpoint at `timestamp` (POSIX)."""
    if not 0 < timestamp < 2**63:
        raise ValueError(f"timestamp {timestamp} is outside 1..2^63-1")
    cosigner = VerifierKey(key.name, COSIGNATURE_V1, key.verifier.public_key)
    signature = key.private.sign(cosignature_message(note.text, timestamp))
    return NoteSignature(key.name, cosigner.key_id, _TIMESTAMP.pack(timestamp) + signature)


def _verifies(public_key: bytes, signature: bytes, message: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True


def _lines_of(note: SignedNote, key: VerifierKey) -> list[NoteSignature]:
    """The signature lines that claim to be `key`'s: same name and same key id."""
    return [s for s in note.signatures if s.name == key.name and s.key_id == key.key_id]


def signed_by(note: SignedNote, key: VerifierKey) -> bool:
    """Whether a plain Ed25519 (type 0x01) signature of `key` on the note's text verifies."""
    if key.kind != ED25519:
        return False
    return any(
        _verifies(key.public_key, s.signature, note.text.encode()) for s in _lines_of(note, key)
    )


def cosigned_by(note: SignedNote, key: VerifierKey) -> int | None:
    """The timestamp of a valid cosignature/v1 of `key` (taken as a type 0x04 key) on the
    note's checkpoint, or None when there is none."""
    cosigner = key.as_cosigner()
    for line in _lines_of(note, cosigner):
        if len(line.signature) != _TIMESTAMP.size + _SIGNATURE_SIZE:
            continue
        (timestamp,) = _TIMESTAMP.unpack(line.signature[: _TIMESTAMP.size])
        if timestamp >= 2**63:
            continue
        message = cosignature_message(note.text, timestamp)
        if _verifies(cosigner.public_key, line.signature[_TIMESTAMP.size :], message):
            return int(timestamp)
    return None


def valid_cosigners(note: SignedNote, keys: Iterable[VerifierKey]) -> list[VerifierKey]:
    """The distinct keys of `keys` with a valid cosignature on the note."""
    # By public key: one key given twice, or under two names, is still one witness.
    found: dict[bytes, VerifierKey] = {}
    for key in keys:
        cosigner = key.as_cosigner()
        if cosigned_by(note, cosigner) is not None:
            found.setdefault(cosigner.public_key, cosigner)
    return list(found.values())


def parse_keys(texts: Sequence[str]) -> list[VerifierKey]:
    """Raises: MalformedNote: one of them is not a vkey."""
    return [VerifierKey.parse(text) for text in texts]
