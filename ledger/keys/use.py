"""Using data keys: sealing and opening, MACs, signatures, public keys, all from the cache.

The synchronous operations (`encrypt`, `mac`, `value_mac`, `sign`) use only the cache and never
wait for the database; `sealing()` readies it for them: the cache refreshed when stale, nonces
reserved for the seals that follow, and, when asked, a purpose's active key confirmed or named
keys loaded. The asynchronous ones (`decrypt`, `verify_mac`, `verify_signature`) refresh the
cache themselves when a key is one it has not seen.
"""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from functools import lru_cache
from hashlib import sha256
from typing import Self

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ..errors import (
    PublicKeyMismatch,
    ReviewerKekMissing,
    UnknownKey,
)
from .cache import (
    _SIGNING,
    KeyCache,
    KeyState,
    Purpose,
    _aead_of,
    _material,
)
from .public import recorded_public_keys
from .sealing import key_id_of, open_sealed, seal

__all__ = ["KeyUse"]


class KeyUse(KeyCache):
    """What a ring does with its keys."""

    # -- readiness -------------------------------------------------------------------------

    @asynccontextmanager
    async def sealing(
        self,
        *,
        current: Purpose | None = None,
        keys: Iterable[tuple[str, Purpose]] = (),
    ) -> AsyncIterator[Self]:
        """The ring, ready for its synchronous operations (`encrypt`, `mac`, `value_mac`,
        `sign`, and the helpers built on them) in the block: the cache refreshed when older than
        `refresh_seconds` and nonces reserved for the seals that follow (a round trip only per
        block of seals or refresh interval).

        Args:
            current: a purpose whose active key must be the database's now, not the cache's
                (values every process must derive alike at once, such as ids): one query.
            keys: (key id, purpose) pairs the block names: loaded if the cache has not seen
                them (made moments ago in another process).
        """
        await self.fresh()
        if current is not None:
            await self._confirm_active(current)
        for key_id, purpose in keys:
            await self._key_fresh(key_id, purpose)
        yield self

    # -- encryption ------------------------------------------------------------------------

    def encrypt(self, purpose: Purpose, plaintext: bytes, context: bytes) -> bytes:
        """Seal `plaintext` under the active key of `purpose`, bound to `context`.

        Raises:
            NonceBudgetExhausted: the key has sealed its budget (`signoff keys rotate`).
            NoNonceReservation: far more seals than were reserved since `sealing()` was last
                entered (`budget.MAX_CREDIT`).
        """
        loaded = self._key(self.active_key_id(purpose), purpose)
        aead = _aead_of(loaded)
        self.nonces.take(loaded.info.key_id, purpose)
        return seal(aead, purpose, loaded.info.key_id, plaintext, context)

    async def decrypt(self, purpose: Purpose, sealed: bytes, context: bytes, where: str) -> bytes:
        """Open a sealed value; `where` names its place for the error if it does not open. A key
        the cache has not seen (made moments ago in another process) is loaded first.

        Raises:
            DecryptionFailed: altered, or bound to another place.
            UnknownKey: the key it names is unknown or retired.
        """
        key_id = _sealed_key_id(sealed, where)
        loaded = await self._key_fresh(key_id, purpose)
        return open_sealed(_aead_of(loaded), purpose, key_id, sealed, context, where)

    def decrypt_cached(self, purpose: Purpose, sealed: bytes, context: bytes, where: str) -> bytes:
        """`decrypt` from the keys this process has loaded, for a synchronous caller (a
        protocol library's codec); a key it has not seen is `UnknownKey`.

        Raises:
            DecryptionFailed, UnknownKey: as `decrypt`.
        """
        key_id = _sealed_key_id(sealed, where)
        loaded = self._key(key_id, purpose)
        return open_sealed(_aead_of(loaded), purpose, key_id, sealed, context, where)

    # -- MACs and signatures -----------------------------------------------------------------

    def mac(self, message: bytes) -> tuple[str, bytes]:
        """HMAC-SHA256 of `message` under the active approval-MAC key: (key id, tag)."""
        key_id = self.active_key_id(Purpose.APPROVAL_MAC)
        material = _material(self._key(key_id, Purpose.APPROVAL_MAC))
        return key_id, hmac.new(material, message, sha256).digest()

    async def verify_mac(self, key_id: str, message: bytes, tag: bytes) -> bool:
        """Whether `tag` is the MAC of `message` under `key_id` (constant-time comparison).

        Raises:
            UnknownKey: no such MAC key, or it is retired.
        """
        material = _material(await self._key_fresh(key_id, Purpose.APPROVAL_MAC))
        return hmac.compare_digest(hmac.new(material, message, sha256).digest(), tag)

    def value_mac(self, message: bytes, key_id: str | None = None) -> tuple[str, str]:
        """HMAC-SHA256 (hex) of `message` under a value-MAC key, the active one by default:
        (key id, hex). Only the cache: a key named that it may not have seen is loaded by
        `sealing(keys=...)`.

        Raises:
            NoActiveKey: no active value-MAC key (and none named).
            UnknownKey: the named key is unknown, retired or not a value-MAC key.
        """
        key_id = key_id or self.active_key_id(Purpose.VALUE_MAC)
        base = self._key(key_id, Purpose.VALUE_MAC).hmac_base
        if base is None:
            raise UnknownKey(key_id, "not a value-MAC key")
        mac = base.copy()
        mac.update(message)
        return key_id, mac.hexdigest()

    def live_key_ids(self, purpose: Purpose) -> list[str]:
        """The keys of `purpose` that still open or verify: the active one first, then the
        decrypt-only ones, newest first."""
        live = [
            k.info
            for k in self._keys.values()
            if k.info.purpose is purpose and k.info.state is not KeyState.RETIRED
        ]
        live.sort(key=lambda i: (i.state is not KeyState.ACTIVE, -i.created_at.timestamp()))
        return [i.key_id for i in live]

    def sign(self, message: bytes, purpose: Purpose = Purpose.DIGEST_SIGNING) -> tuple[str, bytes]:
        """Ed25519 signature of `message` under the active signing key of `purpose` (digest or
        decision signing): (key id, signature).

        Raises:
            ReviewerKekMissing: decision signing on a ring without the reviewer KEK.
            PublicKeyMismatch: the key's stored public key is not its own; nothing is signed.
            NoActiveKey: no active key of `purpose`.
        """
        if purpose not in _SIGNING:
            raise UnknownKey("?", f"{purpose} keys do not sign")
        if purpose is Purpose.DECISION_SIGNING:
            self.require_decision_signer()
        key_id = self.active_key_id(purpose)
        loaded = self._key(key_id, purpose)
        if loaded.signer is None:
            raise ReviewerKekMissing(loaded.info.kek_id)
        return key_id, loaded.signer.sign(message)

    async def verify_signature(
        self, key_id: str, message: bytes, signature: bytes, purpose: Purpose
    ) -> bool:
        """Whether `signature` is an Ed25519 signature of `message` by the `purpose` key
        `key_id` (decrypt-only keys still verify).

        Raises:
            UnknownKey: no such signing key, or it is retired.
        """
        if purpose not in _SIGNING:
            raise UnknownKey(key_id, f"{purpose} keys do not sign")
        loaded = await self._key_fresh(key_id, purpose)
        if loaded.info.public_key is None:
            raise UnknownKey(key_id, "it has no public key")
        if purpose is Purpose.DECISION_SIGNING:
            await self._vouched(key_id, loaded.info.public_key)
        try:
            _public_key(loaded.info.public_key).verify(signature, message)
        except (InvalidSignature, ValueError):
            return False
        return True

    def public_key(
        self, key_id: str | None = None, purpose: Purpose = Purpose.DIGEST_SIGNING
    ) -> tuple[str, bytes]:
        """A signing key's raw Ed25519 public key (the purpose's active one by default), as
        `data_keys` holds it and checked against its private key when the ring can unwrap it.

        Raises:
            PublicKeyMismatch: the stored public key is not the private key's.
        """
        key_id = key_id or self.active_key_id(purpose)
        self.check_public(key_id)
        info = self._all.get(key_id)
        if info is None or info.purpose != purpose or info.public_key is None:
            raise UnknownKey(key_id, f"not a {purpose} key")
        return key_id, info.public_key

    def check_public(self, key_id: str) -> None:
        """Raise the ring's refusal of a signing key whose stored public key is not its own,
        or whose wrapped material does not open.

        Raises:
            PublicKeyMismatch: refused when the ring unwrapped it.
            UnknownKey: its row's wrapped material does not open under the KEK that wrapped it.
        """
        if key_id in self._refused:
            raise self._refused[key_id]

    async def _vouched(self, key_id: str, public: bytes) -> None:
        """Refuse a decision key whose public key is not the one the journal recorded when the
        key was made: a worker checks decisions with it, and `data_keys` alone is no proof.
        The records are read once per new key id.

        Raises:
            PublicKeyMismatch: `data_keys` disagrees with the journal, or it has no record.
        """
        if key_id not in self._recorded:
            self._recorded = await recorded_public_keys(self.db, Purpose.DECISION_SIGNING)
        if self._recorded.get(key_id) != public:
            raise PublicKeyMismatch(key_id, "the public key the journal recorded for it")


@lru_cache(maxsize=64)
def _public_key(raw: bytes) -> Ed25519PublicKey:
    """The loaded key of raw Ed25519 public key bytes (loading costs a tenth of a check)."""
    return Ed25519PublicKey.from_public_bytes(raw)


def _sealed_key_id(sealed: bytes, where: str) -> str:
    key_id = key_id_of(sealed)
    if key_id is None:
        raise UnknownKey("?", f"{where} is not a Signoff ciphertext")
    return key_id
