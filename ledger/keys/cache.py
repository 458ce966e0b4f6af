"""The per-process cache of data keys: loaded from the database, unwrapped by the KEK, refreshed
when older than `refresh_seconds`, with the nonces this process reserved for its sealing keys.

Every process loads the keys it may use (active and decrypt-only) and refreshes them when the
cache is older than `refresh_seconds` (the settings' `key_refresh_seconds`: default 10,
`SIGNOFF_KEY_REFRESH_SECONDS`). That bounds rotation: within that time after `signoff keys
rotate`, every running process encrypts with the new key, and all of them keep decrypting with
the old one until it is retired. A key id that is not in the cache triggers one refresh before
it is called unknown, so data written under a key created seconds ago in another process still
opens.

A signing key's public half is derived from its private half whenever the key is unwrapped; a
key whose stored public key differs is refused (`PublicKeyMismatch`): the ring neither signs
with it nor publishes it. So is a key whose wrapped material does not open under the KEK that
wrapped it (`UnknownKey`): its row was changed, and what it made is reported, not trusted.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from hashlib import sha256

import asyncpg
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from ..errors import (
    KekMismatch,
    KekMissing,
    KeyRingError,
    NoActiveKey,
    PublicKeyMismatch,
    ReviewerKekMissing,
    UnknownKey,
)
from ..log import get_logger
from ..store import Database
from . import _sql
from .budget import NonceBudget, Wear
from .kek import Kek

__all__ = ["SIGNING_PURPOSES", "KeyCache", "KeyInfo", "KeyState", "Purpose"]

# One logger for the ring and its parts, as before they were split.
log = get_logger("ledger.keys.ring")


class Purpose(StrEnum):
    CHECKPOINT = "checkpoint"
    RESULT = "result"
    APPROVAL_MAC = "approval_mac"
    DIGEST_SIGNING = "digest_signing"
    VALUE_MAC = "value_mac"  # keyed digests of arguments and results (`ledger.keys.digests`)
    DECISION_SIGNING = "decision_signing"  # wrapped by the reviewer-side KEK


class KeyState(StrEnum):
    ACTIVE = "active"  # encrypts, MACs, signs and opens
    DECRYPT_ONLY = "decrypt_only"  # opens and verifies only
    RETIRED = "retired"  # no longer signs; a sealing key opens nothing, a MAC or signing key
    # still verifies what it made (retire means "no longer signs", not "forgotten")


SIGNING_PURPOSES: frozenset[str] = frozenset({"digest_signing", "decision_signing"})
"""The purposes whose keys are Ed25519 key pairs (the rest are 32 random bytes)."""
_SEALING: frozenset[str] = frozenset({"checkpoint", "result"})  # the AES-GCM keys

_PREFIX = {
    Purpose.CHECKPOINT: "ckpt",
    Purpose.RESULT: "res",
    Purpose.APPROVAL_MAC: "mac",
    Purpose.DIGEST_SIGNING: "sig",
    Purpose.VALUE_MAC: "vmac",
    Purpose.DECISION_SIGNING: "dsig",
}
_SIGNING = (Purpose.DIGEST_SIGNING, Purpose.DECISION_SIGNING)
_ADMIN_LOCK = 0x5167_0FF1


@dataclass(frozen=True, slots=True)
class KeyInfo:
    """A data key as listed (never its material)."""

    key_id: str
    purpose: Purpose
    state: KeyState
    kek_id: str
    public_key: bytes | None
    created_at: datetime
    rotated_at: datetime | None
    retired_at: datetime | None
    sealed: int = 0
    """Messages sealed (reserved, across processes) under a sealing key at the last refresh."""


@dataclass(frozen=True, slots=True)
class _Loaded:
    # Only the key's info is shown: a repr lands in tracebacks and debuggers, key material
    # never may.
    info: KeyInfo
    material: bytes | None = field(repr=False)  # None: a decision key without the reviewer KEK
    aead: AESGCM | None = field(repr=False)
    hmac_base: hmac.HMAC | None = field(default=None, repr=False)  # keyed once, copied per MAC
    signer: Ed25519PrivateKey | None = field(default=None, repr=False)  # loaded once


def _wrap_context(key_id: str, purpose: str) -> bytes:
    return f"signoff.datakey.v1|{key_id}|{purpose}".encode()


def _info(row: asyncpg.Record) -> KeyInfo:
    return KeyInfo(
        row["key_id"],
        Purpose(row["purpose"]),
        KeyState(row["state"]),
        row["kek_id"],
        row["public_key"],
        row["created_at"],
        row["rotated_at"],
        row["retired_at"],
        row["sealed"],
    )


class KeyCache:
    """The data keys of one database as this process holds them (`KeyRing` uses and
    administers them)."""

    def __init__(
        self,
        db: Database,
        kek: Kek | None,
        *,
        reviewer_kek: Kek | None = None,
        refresh_seconds: float | None = None,
    ):
        self.db = db
        self.kek = kek
        self.reviewer_kek = reviewer_kek
        if refresh_seconds is None:
            refresh_seconds = db.settings.key_refresh_seconds
        self.refresh_seconds = refresh_seconds
        self._keys: dict[str, _Loaded] = {}
        self._all: dict[str, KeyInfo] = {}
        self._active: dict[Purpose, str] = {}
        self._refused: dict[str, KeyRingError] = {}
        self._recorded: dict[str, bytes] = {}  # decision keys' public keys, as journaled
        self._loaded_at = -float("inf")
        self._lock = asyncio.Lock()
        self.nonces = NonceBudget()
        self._worn: set[str] = set()  # keys this process saw pass budget.ROTATE_AT, to act on
        self._rate_told = -float("inf")  # when a refused reservation was last logged

    def _creatable(self) -> list[Purpose]:
        """The purposes this ring can make keys for: all but decision signing without the
        reviewer KEK."""
        return [p for p in Purpose if p is not Purpose.DECISION_SIGNING or self.reviewer_kek]

    def _kek_for(self, purpose: Purpose) -> Kek | None:
        return self.reviewer_kek if purpose is Purpose.DECISION_SIGNING else self.kek

    @property
    def can_sign_decisions(self) -> bool:
        """Whether this ring holds the reviewer KEK (the reviewer side), so it signs decisions."""
        return self.reviewer_kek is not None

    def require_decision_signer(self) -> None:
        """Raise `ReviewerKekMissing` unless this ring can sign decisions (check it before
        writing anything that will need a signature)."""
        if self.reviewer_kek is None:
            raise ReviewerKekMissing(self._decision_kek_id())

    # -- reading the cache -------------------------------------------------------------------

    async def fresh(self) -> None:
        """Refresh the cache if it is older than `refresh_seconds`, and reserve nonces for the
        active sealing keys when this process runs low (one round trip per block of seals).
        What `sealing()` and every asynchronous operation of the ring do first."""
        if time.monotonic() - self._loaded_at >= self.refresh_seconds:
            await self.refresh()
        elif self.nonces.runs_low(self._sealing_keys()):
            async with self._lock, self.db.connection() as conn:
                await self._reserve(conn)
            await self._replace_worn()

    async def _confirm_active(self, purpose: Purpose) -> None:
        """Refresh now if the database's active key of `purpose` is not the cached one (rotated
        moments ago by another process). One small query; keys are unwrapped only on a change."""
        async with self.db.connection() as conn:
            active = await conn.fetchval(_sql.SELECT_ACTIVE, str(purpose))
        if active != self._active.get(purpose):
            await self.refresh()

    async def refresh(self) -> None:
        """Reload every key from the database now (and reserve nonces, as `fresh` does)."""
        async with self._lock, self.db.connection() as conn:
            rows = await conn.fetch(_sql.SELECT_KEYS)
            keys: dict[str, _Loaded] = {}
            infos: dict[str, KeyInfo] = {}
            active: dict[Purpose, str] = {}
            refused: dict[str, KeyRingError] = {}
            for row in rows:
                info = _info(row)
                infos[info.key_id] = info
                if info.state is KeyState.RETIRED and info.purpose in _SEALING:
                    continue  # a retired sealing key opens nothing; the rest still verify
                try:
                    loaded = self._unwrap(info, row["wrapped"])
                except KekMismatch as e:
                    if e.needed != e.configured:
                        raise  # another KEK: the configuration is wrong, not the row
                    # The KEK that wrapped it (its id is the KEK's hash) does not open it.
                    refused[info.key_id] = UnknownKey(
                        info.key_id,
                        f"its wrapped material does not open under KEK {info.kek_id}, which "
                        "wrapped it: the data_keys row was changed",
                    )
                    if info.state is KeyState.ACTIVE:
                        active[info.purpose] = info.key_id
                    continue
                if _derived_public(loaded) == info.public_key:
                    keys[info.key_id] = loaded
                else:
                    refused[info.key_id] = PublicKeyMismatch(info.key_id, "its private key")
                if info.state is KeyState.ACTIVE:
                    active[info.purpose] = info.key_id
            for key_id in refused.keys() - self._refused.keys():
                if isinstance(refused[key_id], PublicKeyMismatch):
                    log.error(
                        "signing key refused: public key differs from its private key",
                        key_id=key_id,
                    )
                else:
                    log.error("data key refused: its wrapped material does not open", key_id=key_id)
            self._keys, self._all, self._active = keys, infos, active
            self._refused = refused
            self._loaded_at = time.monotonic()
            await self._reserve(conn)
        await self._replace_worn()

    def _sealing_keys(self) -> list[str]:
        return [k for p, k in self._active.items() if p in _SEALING and k in self._keys]

    async def _reserve(self, conn: asyncpg.Connection) -> None:
        """Reserve the blocks of nonces this process runs low on (a statement of its own,
        committed at once: it never waits for the caller's transaction)."""
        if self.db.read_only:  # a standby's ring opens and verifies; nothing is sealed there
            return
        wanted = self.nonces.wanted(self._sealing_keys())
        if not wanted:
            return
        try:
            rows = await conn.fetch(_sql.RESERVE, [k for k, _ in wanted], [n for _, n in wanted])
        except asyncpg.ConfigurationLimitExceededError:
            # This login reserved its most for this minute (`budget.RATE_PER_MINUTE`): seal on
            # credit, and ask again at the next `sealing()`.
            self.nonces.refused([k for k, _ in wanted])
            if time.monotonic() - self._rate_told >= 60:
                self._rate_told = time.monotonic()
                log.warning("nonce reservation refused: this login's rate is spent this minute")
            return
        for row in rows:
            if row["total"] is None:  # retired since the cache was loaded: nothing reserved
                continue
            wear = self.nonces.granted(row["key_id"], row["n"], row["total"])
            if wear is Wear.HALF:
                log.warning(
                    "data key past half its nonce budget: rotate it soon",
                    key_id=row["key_id"],
                    sealed=row["total"],
                    budget=self.nonces.budget,
                )
            elif wear is Wear.ROTATE:
                self._worn.add(row["key_id"])

    async def _replace_worn(self) -> None:
        """Act on keys this process saw pass three quarters of their budget: here, say so
        loudly; a ring that may rotate keys rotates them (`KeyRing`)."""
        worn, self._worn = self._worn, set()
        for key_id in worn:
            self._tell_worn(key_id)

    def _tell_worn(self, key_id: str) -> None:
        info = self._all.get(key_id)
        log.error(
            "data key near its nonce budget: rotate it now",
            key_id=key_id,
            purpose=None if info is None else str(info.purpose),
            budget=self.nonces.budget,
        )

    def _unwrap(self, info: KeyInfo, wrapped: bytes) -> _Loaded:
        kek = self._kek_for(info.purpose)
        if kek is None and info.purpose is Purpose.DECISION_SIGNING:
            return _Loaded(info, None, None)  # a worker: verifies with the public key only
        if kek is None:
            raise KekMissing(info.kek_id)
        source = getattr(kek, "source", None)  # where the KEK came from, for the message
        if info.kek_id != kek.kek_id:
            raise KekMismatch(info.kek_id, kek.kek_id, source)
        try:
            material = kek.unwrap(wrapped, _wrap_context(info.key_id, info.purpose))
        except InvalidTag as e:
            raise KekMismatch(info.kek_id, kek.kek_id, source) from e
        aead = AESGCM(material) if info.purpose in _SEALING else None
        base = hmac.new(material, digestmod=sha256) if info.purpose is Purpose.VALUE_MAC else None
        signer = (
            Ed25519PrivateKey.from_private_bytes(material) if info.purpose in _SIGNING else None
        )
        return _Loaded(info, material, aead, base, signer)

    def unusable_active(self) -> dict[Purpose, str]:
        """The purposes whose active key this ring cannot use, as of its last refresh, and why:
        none is active, or it was refused (its wrapped material does not open, or its public key
        is not its private key's). A decision key held without the reviewer KEK verifies only:
        a worker's ring is meant to be so, and it is not listed."""
        found: dict[Purpose, str] = {}
        for purpose in Purpose:
            key_id = self._active.get(purpose)
            if key_id is None:
                found[purpose] = f"no active {purpose} key"
            elif key_id in self._refused:
                found[purpose] = str(self._refused[key_id])
            elif key_id not in self._keys:
                found[purpose] = f"the active {purpose} key {key_id} is not loaded"
        return found

    def all_keys(self) -> list[KeyInfo]:
        """Every key, retired ones included, as of the last refresh."""
        return list(self._all.values())

    def active_key_id(self, purpose: Purpose) -> str:
        key_id = self._active.get(purpose)
        if key_id is None:
            raise NoActiveKey(purpose)
        return key_id

    def _key(self, key_id: str, purpose: Purpose) -> _Loaded:
        loaded = self._keys.get(key_id)
        if key_id in self._refused:
            raise self._refused[key_id]
        if loaded is None:
            info = self._all.get(key_id)
            raise UnknownKey(key_id, "retired" if info is not None else "no such key")
        if loaded.info.purpose is not purpose:
            raise UnknownKey(key_id, f"a {loaded.info.purpose} key, not a {purpose} key")
        return loaded

    async def _key_fresh(self, key_id: str, purpose: Purpose) -> _Loaded:
        """The key, from a cache no older than `refresh_seconds` that has seen it if any
        process made it."""
        await self.fresh()
        if key_id not in self._keys and key_id not in self._all and key_id not in self._refused:
            await self.refresh()  # created moments ago in another process?
        return self._key(key_id, purpose)

    def _decision_kek_id(self) -> str:
        """The KEK id that wraps the decision key, for errors (none yet: any will do)."""
        for info in self._all.values():
            if info.purpose is Purpose.DECISION_SIGNING and info.state is not KeyState.RETIRED:
                return info.kek_id
        return "none yet: any new KEK"


def _material(loaded: _Loaded) -> bytes:
    if loaded.material is None:
        raise ReviewerKekMissing(loaded.info.kek_id)
    return loaded.material


def _aead_of(loaded: _Loaded) -> AESGCM:
    if loaded.aead is None:
        raise UnknownKey(loaded.info.key_id, f"a {loaded.info.purpose} key does not encrypt")
    return loaded.aead


def _raw_public(public: Ed25519PublicKey) -> bytes:
    return public.public_bytes(Encoding.Raw, PublicFormat.Raw)


def _derived_public(loaded: _Loaded) -> bytes | None:
    """The public key a loaded key's material gives: None for keys that do not sign, and for
    a decision key loaded without the reviewer KEK (its stored public key is all there is)."""
    if loaded.info.purpose not in SIGNING_PURPOSES:
        return None
    if loaded.material is None:
        return loaded.info.public_key
    return _raw_public(Ed25519PrivateKey.from_private_bytes(loaded.material).public_key())
