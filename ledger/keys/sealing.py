"""The format of Signoff ciphertexts: pure functions, no I/O.

    sealed = 0x01 | len(key_id) (1 byte) | key_id (ASCII) | nonce (12 bytes) | AES-256-GCM output

The associated data is `signoff.seal.v1|<purpose>|<key id>|` followed by the caller's context
(for example a checkpoint row's thread, namespace and id), so a ciphertext opens only under the
purpose, key and place it was written for.
"""

from __future__ import annotations

import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ..errors import DecryptionFailed

__all__ = ["FORMAT", "key_id_of", "open_sealed", "seal"]

FORMAT = 1
_NONCE = 12


def _associated(purpose: str, key_id: str, context: bytes) -> bytes:
    return b"signoff.seal.v1|" + purpose.encode() + b"|" + key_id.encode() + b"|" + context


def seal(aead: AESGCM, purpose: str, key_id: str, plaintext: bytes, context: bytes) -> bytes:
    encoded = key_id.encode("ascii")
    nonce = os.urandom(_NONCE)
    body = aead.encrypt(nonce, plaintext, _associated(purpose, key_id, context))
    return bytes((FORMAT, len(encoded))) + encoded + nonce + body


def key_id_of(sealed: bytes | None) -> str | None:
    """The key id a sealed value names, or None when it is not in our format (or not there at
    all: a column emptied by whoever could edit the row)."""
    if not isinstance(sealed, bytes | bytearray | memoryview):
        return None
    sealed = bytes(sealed)
    if len(sealed) < 2 or sealed[0] != FORMAT or len(sealed) < 2 + sealed[1] + _NONCE + 16:
        return None
    try:
        return sealed[2 : 2 + sealed[1]].decode("ascii")
    except UnicodeDecodeError:
        return None


def open_sealed(
    aead: AESGCM, purpose: str, key_id: str, sealed: bytes, context: bytes, where: str
) -> bytes:
    start = 2 + sealed[1]
    nonce, body = sealed[start : start + _NONCE], sealed[start + _NONCE :]
    try:
        return aead.decrypt(nonce, body, _associated(purpose, key_id, context))
    except InvalidTag as e:
        raise DecryptionFailed(key_id, where) from e
