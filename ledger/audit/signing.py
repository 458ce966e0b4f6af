"""The log's side of checkpoints: a digest's tree head as a C2SP checkpoint, signed by the key
ring's digest-signing key that signed the digest (formats in `ledger.audit.checkpoint`)."""

from __future__ import annotations

import dataclasses

from ..errors import DigestError
from ..keys import KeyRing, Purpose
from .checkpoint import Checkpoint, sign_checkpoint
from .verifier import Digest

__all__ = ["with_checkpoint"]


def with_checkpoint(digest: Digest, ring: KeyRing, origin: str | None) -> Digest:
    """`digest` with its checkpoint under `origin` (unchanged when None), signed by the digest's
    key. Call it right after signing the digest, with no await between, so the ring's active
    key is still that key.

    Raises:
        DigestError: the ring's active digest-signing key is no longer the digest's.
    """
    if origin is None:
        return digest
    key_id, public = ring.public_key(digest.key_id)

    def sign(message: bytes) -> bytes:
        signer, signature = ring.sign(message, Purpose.DIGEST_SIGNING)
        if signer != key_id:  # a rotation in between: the note must be the digest's key's
            raise DigestError(f"the active digest-signing key is {signer}, not {key_id}")
        return signature

    note = sign_checkpoint(Checkpoint(origin, digest.tree_size, digest.root), public, sign)
    return dataclasses.replace(digest, checkpoint=note)
