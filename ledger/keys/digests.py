"""Keyed digests: how arguments and results are named in rows, events, audit views and exports
without being guessable from them.

    digest = "hmac:" <key id> ":" hex(HMAC-SHA256(key, "signoff.value.v1|" canonical JSON))

under a `value_mac` key of the ring (ids `vmac-...`), the active one when written.

An unkeyed SHA-256 of a small value (an order id, an amount) is found by trying candidates; an
HMAC is not, without the key. The digest names its key, so it is checked after a rotation under
the key it names (`matches`), not recomputed under the active key: equality of a digest written
now with one written before a rotation is decided by recomputing, never by comparing the text.
The same value under the same key gives the same digest in every process (no salt, no place),
so an approval and the call it allows still carry the same digest of the same arguments.
Anything that is not a keyed digest (a plain SHA-256, say) matches nothing.
"""

from __future__ import annotations

import hmac
from typing import Any

from ..canonical import canonical_json
from .ring import KeyRing, Purpose

__all__ = [
    "DIGEST_PREFIX",
    "digest_key_id",
    "matches",
    "text_digest",
    "value_digest",
    "value_digests",
]

DIGEST_PREFIX = "hmac:"
_TAG = b"signoff.value.v1|"


def text_digest(ring: KeyRing, text: str, key_id: str | None = None) -> str:
    """The keyed digest of canonical JSON `text`, under `key_id` (default: the active key)."""
    used, tag = ring.value_mac(_TAG + text.encode(), key_id)
    return f"{DIGEST_PREFIX}{used}:{tag}"


def value_digest(ring: KeyRing, value: Any) -> str:
    """The keyed digest of a JSON value under the active value-MAC key.

    Raises:
        InvalidJson: not a JSON value (`ledger.canonical.canonical_json`).
        NoActiveKey: the ring has no value-MAC key (`signoff keys init`).
    """
    return text_digest(ring, canonical_json(value))


def value_digests(ring: KeyRing, text: str) -> list[str]:
    """Every digest canonical JSON `text` may be stored under: one per live value-MAC key
    (the active one first). For finding a row by its digest in one statement, whatever key
    wrote it."""
    return [text_digest(ring, text, k) for k in ring.live_key_ids(Purpose.VALUE_MAC)]


def digest_key_id(digest: str) -> str | None:
    """The value-MAC key a keyed digest names; None for anything else."""
    if not digest.startswith(DIGEST_PREFIX):
        return None
    key_id, sep, tag = digest[len(DIGEST_PREFIX) :].rpartition(":")
    return key_id if sep and key_id and len(tag) == 64 else None


async def matches(ring: KeyRing, digest: str, text: str) -> bool:
    """Whether `digest` is the keyed digest of canonical JSON `text`, recomputed under the key
    the digest names (constant-time comparison); anything else is not.

    Raises:
        UnknownKey: the digest names a value-MAC key that is unknown or retired.
    """
    key_id = digest_key_id(digest)
    if key_id is None:
        return False
    async with ring.sealing(keys=[(key_id, Purpose.VALUE_MAC)]):
        _, tag = ring.value_mac(_TAG + text.encode(), key_id)
    return hmac.compare_digest(digest, f"{DIGEST_PREFIX}{key_id}:{tag}")
