"""Signing public keys as the journal recorded them, and the check that `data_keys` agrees.

A signing key's `key.created` (or `key.rotated`) event records its public key in hex, in the
same transaction that stores the key. The journal is append-only and hash-chained, so a public
key changed in `data_keys` afterwards disagrees with it: `published_keys` refuses such a key,
and a key with no record at all (one Signoff did not make). Only the first record of a key
counts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import asyncpg

from ..errors import PublicKeyMismatch, PublicKeyUnrecorded
from ..journal import Journal
from ..store import Database

if TYPE_CHECKING:
    from .ring import KeyInfo, KeyRing

__all__ = ["public_text", "published_keys", "recorded_public_keys"]

_RECORDS = frozenset({"key.created", "key.rotated"})


def public_text(public_key: bytes) -> str:
    """A public key as a key event records it."""
    return public_key.hex()


async def recorded_public_keys(
    db: Database, purpose: str, *, connection: asyncpg.Connection | None = None
) -> dict[str, bytes]:
    """The public keys of a signing purpose's keys, by key id, as the journal first recorded
    them (stream `keys:<purpose>`; read on `connection` when given).

    Raises:
        PublicKeyMismatch: a later record of a key disagrees with its first, or is unreadable.
    """
    found: dict[str, bytes] = {}
    events = await Journal(db).read_stream(f"keys:{purpose}", connection=connection)
    for event in events:
        text, key_id = event.data.get("public_key"), event.data.get("key_id")
        if event.type not in _RECORDS or not isinstance(key_id, str) or text is None:
            continue
        try:
            public = bytes.fromhex(text) if isinstance(text, str) else b""
        except ValueError:
            public = b""
        if len(public) != 32 or found.setdefault(key_id, public) != public:
            raise PublicKeyMismatch(key_id, f"the journal's record at position {event.position}")
    return found


async def published_keys(ring: KeyRing, purpose: str) -> list[tuple[KeyInfo, bytes]]:
    """Every key of a signing purpose in the ring (retired ones too) with its public key as
    the journal recorded it, checked against `data_keys` and, for keys the ring unwrapped,
    against the private key.

    Raises:
        PublicKeyMismatch: `data_keys` disagrees with the journal or with the private key.
        PublicKeyUnrecorded: a key's public key is not in the journal.
    """
    recorded = await recorded_public_keys(ring.db, purpose)
    keys: list[tuple[KeyInfo, bytes]] = []
    for info in ring.all_keys():
        if info.purpose != purpose:
            continue
        public = recorded.get(info.key_id)
        if public is None:
            raise PublicKeyUnrecorded(info.key_id)
        if info.public_key != public:
            raise PublicKeyMismatch(info.key_id, "the public key the journal recorded for it")
        ring.check_public(info.key_id)
        keys.append((info, public))
    return keys
