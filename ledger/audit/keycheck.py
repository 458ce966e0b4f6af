"""The signing keys' public halves in `data_keys` against the journal's records of them: part
of `signoff ledger verify`, with no KEK needed.

A signing key's `key.created` (or `key.rotated`) event records its public key in the same
transaction that stores the key, and the journal is hash-chained, so a public key swapped in
`data_keys` afterwards (to make a forged signature check out, or to disown a real one) differs
from the record. Each such key is a finding, never an error that stops the check.
"""

from __future__ import annotations

from ..errors import PublicKeyMismatch
from ..keys.cache import SIGNING_PURPOSES
from ..keys.public import recorded_public_keys
from ..store import Database

__all__ = ["check_signing_keys"]

_SIGNING_KEYS = """
SELECT key_id, purpose, public_key FROM data_keys
WHERE purpose = ANY($1::text[])
ORDER BY created_at, key_id
"""


async def check_signing_keys(db: Database) -> tuple[str, ...]:
    """Every signing key of `data_keys` (retired ones too) whose public key is not the one the
    journal recorded for it, or that the journal never recorded, one problem each."""
    purposes = sorted(SIGNING_PURPOSES)
    async with db.connection() as conn:
        rows = await conn.fetch(_SIGNING_KEYS, purposes)
    problems: list[str] = []
    for purpose in purposes:
        try:
            recorded = await recorded_public_keys(db, purpose)
        except PublicKeyMismatch as e:
            problems.append(f"signing keys: {e}")
            continue
        for row in (r for r in rows if r["purpose"] == purpose):
            key_id, stored = row["key_id"], row["public_key"]
            public = recorded.get(key_id)
            if public is None:
                problems.append(
                    f"signing keys: {purpose} key {key_id}: the journal never recorded its "
                    "public key (Signoff did not make it)"
                )
            elif stored is None or bytes(stored) != public:
                shown = "none" if stored is None else bytes(stored).hex()
                problems.append(
                    f"signing keys: {purpose} key {key_id}: data_keys holds public key {shown}, "
                    f"the journal recorded {public.hex()}: data_keys was changed"
                )
    return tuple(problems)
