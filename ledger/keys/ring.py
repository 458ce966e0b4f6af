"""The key ring: data keys in the database, wrapped by the KEK, cached in every process.

Every process loads the keys it may use (active and decrypt-only) and refreshes them when the
cache is older than `refresh_seconds` (the settings' `key_refresh_seconds`: default 10,
`SIGNOFF_KEY_REFRESH_SECONDS`). That bounds
rotation: within that time after `signoff keys rotate`, every running process encrypts with the
new key, and all of them keep decrypting with the old one until it is retired. A key id that is
not in the cache triggers one refresh before it is called unknown, so data written under a key
created seconds ago in another process still opens.

Encryption and MACs are synchronous and use only the cache (callers on async paths first
`await ring.fresh()`, which also reserves nonces: `.budget`); key administration (init, rotate,
retire, rewrap) is serialized by one advisory lock, writes `data_keys` only through the
database's key functions and is recorded in the journal (stream `keys:<purpose>`; never the
key material) by `_record`, in the same transaction.

A signing key's public half is derived from its private half whenever the key is unwrapped; a
key whose stored public key differs is refused (`PublicKeyMismatch`): the ring neither signs
with it nor publishes it. Its `key.created` event records the public key (hex), so auditors and
`.public` can check `data_keys` against the journal.

Two KEKs. The worker KEK wraps every key but one: the `decision_signing` key, which signs
reviewers' decisions, is wrapped by the reviewer-side KEK (`SIGNOFF_REVIEWER_KEK[_FILE]`), which
agent workers never hold. A ring opened without it loads that key's public half only: it
verifies decisions and cannot sign them (`ReviewerKekMissing`), and it never creates one.
"""

from __future__ import annotations

import asyncio
import hmac
import os
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from functools import lru_cache
from hashlib import sha256
from typing import Any

import asyncpg
from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from ..errors import (
    KekMismatch,
    KekMissing,
    KeyStateError,
    NoActiveKey,
    PermissionDenied,
    PublicKeyMismatch,
    ReviewerKekMissing,
    UnknownKey,
)
from ..journal import Journal, NewEvent
from ..log import get_logger
from ..store import Database
from .budget import NonceBudget
from .kek import Kek
from .kek_files import resolve_kek
from .public import public_text, recorded_public_keys
from .sealing import key_id_of, open_sealed, seal

__all__ = ["SIGNING_PURPOSES", "KeyInfo", "KeyRing", "KeyState", "Purpose"]

log = get_logger(__name__)


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
    RETIRED = "retired"  # kept for the record; opens nothing


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

_SELECT_KEYS = """
SELECT key_id, purpose, state, kek_id, wrapped, public_key, created_at, rotated_at, retired_at,
       sealed
FROM data_keys ORDER BY created_at, key_id
"""
_SELECT_ACTIVE = "SELECT key_id FROM data_keys WHERE purpose = $1 AND state = 'active'"
# Every write to data_keys: the database's SECURITY DEFINER key functions.
_CREATE = "SELECT signoff_key_create($1, $2, $3, $4, $5)"
_ROTATE = "SELECT signoff_key_rotate($1, $2, $3, $4, $5)"  # returns the demoted key's id
_RETIRE = "SELECT signoff_key_retire($1)"
_REWRAP = "SELECT signoff_key_rewrap($1, $2, $3)"
_RESERVE = """
SELECT r.key_id, r.n, signoff_reserve_nonces(r.key_id, r.n) AS total
FROM unnest($1::text[], $2::integer[]) AS r(key_id, n)
"""


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
    info: KeyInfo
    material: bytes | None  # None: a decision key without the reviewer KEK (verifies only)
    aead: AESGCM | None
    hmac_base: hmac.HMAC | None = None  # keyed once, copied per message (value-MAC keys)
    signer: Ed25519PrivateKey | None = None  # signing keys: loaded once, not per signature


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


class KeyRing:
    """Data keys for one database, usable from any number of processes."""

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
        self._refused: dict[str, PublicKeyMismatch] = {}
        self._recorded: dict[str, bytes] = {}  # decision keys' public keys, as journaled
        self._loaded_at = -float("inf")
        self._lock = asyncio.Lock()
        self.nonces = NonceBudget()

    @classmethod
    async def open(
        cls,
        db: Database,
        kek: Kek | None = None,
        *,
        reviewer_kek: Kek | None = None,
        create_missing: bool = True,
    ) -> KeyRing:
        """Load the key ring; with `create_missing`, create an active key for every purpose
        that has none (the decision signing key only with a reviewer KEK). `reviewer_kek`
        defaults to the settings' (`db.settings.reviewer_kek`): None on agent workers, whose ring
        then verifies decisions and cannot sign them. The KEK defaults to the database's
        settings, as `ledger.keys.kek_files.resolve_kek` finds it: the configured KEK, the
        embedded server's KEK file (created for a database that has no keys yet), or a kept KEK
        file of the KEK the keys need.

        Raises:
            KekMissing: keys exist but no KEK is configured, or the embedded server's KEK file
                is gone (names the KEK needed).
            KekMismatch: the configured KEK did not wrap these keys; nothing is written.
            NoActiveKey: a purpose has no key and this login may not make one (`may_create`
                False: a worker's; `signoff keys init` as the owner or a key administrator).
        """
        if kek is None:
            kek = await resolve_kek(db.settings, cls(db, None).refresh)
        if reviewer_kek is None:
            reviewer_kek = db.settings.reviewer_kek
        ring = cls(db, kek, reviewer_kek=reviewer_kek)
        await ring.refresh()
        missing = set(ring._creatable()) - set(ring._active)
        if create_missing and missing:
            try:
                await ring.init()
            except PermissionDenied:  # a worker's login: key functions are not its to run
                raise NoActiveKey(
                    ", ".join(sorted(p.value for p in missing)), may_create=False
                ) from None
        return ring

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
        active sealing keys when this process runs low (one round trip per block of seals)."""
        if time.monotonic() - self._loaded_at >= self.refresh_seconds:
            await self.refresh()
        elif self.nonces.runs_low(self._sealing_keys()):
            async with self._lock, self.db.connection() as conn:
                await self._reserve(conn)

    async def fresh_active(self, purpose: Purpose) -> None:
        """`fresh`, and a refresh now if the database's active key of `purpose` is not the
        cached one (rotated moments ago by another process): for values every process must
        derive alike at once, such as ids. One small query; keys are unwrapped only on a
        change."""
        await self.fresh()
        async with self.db.connection() as conn:
            active = await conn.fetchval(_SELECT_ACTIVE, str(purpose))
        if active != self._active.get(purpose):
            await self.refresh()

    async def refresh(self) -> None:
        """Reload every key from the database now (and reserve nonces, as `fresh` does)."""
        async with self._lock, self.db.connection() as conn:
            rows = await conn.fetch(_SELECT_KEYS)
            keys: dict[str, _Loaded] = {}
            infos: dict[str, KeyInfo] = {}
            active: dict[Purpose, str] = {}
            refused: dict[str, PublicKeyMismatch] = {}
            for row in rows:
                info = _info(row)
                infos[info.key_id] = info
                if info.state is KeyState.RETIRED:
                    continue
                loaded = self._unwrap(info, row["wrapped"])
                if _derived_public(loaded) == info.public_key:
                    keys[info.key_id] = loaded
                else:
                    refused[info.key_id] = PublicKeyMismatch(info.key_id, "its private key")
                if info.state is KeyState.ACTIVE:
                    active[info.purpose] = info.key_id
            for key_id in refused.keys() - self._refused.keys():
                log.error(
                    "signing key refused: public key differs from its private key", key_id=key_id
                )
            self._keys, self._all, self._active = keys, infos, active
            self._refused = refused
            self._loaded_at = time.monotonic()
            await self._reserve(conn)

    def _sealing_keys(self) -> list[str]:
        return [k for p, k in self._active.items() if p in _SEALING and k in self._keys]

    async def _reserve(self, conn: asyncpg.Connection) -> None:
        """Reserve the blocks of nonces this process runs low on (a statement of its own,
        committed at once: it never waits for the caller's transaction)."""
        wanted = self.nonces.wanted(self._sealing_keys())
        if not wanted:
            return
        rows = await conn.fetch(_RESERVE, [k for k, _ in wanted], [n for _, n in wanted])
        for row in rows:
            if row["total"] is None:  # retired since the cache was loaded: nothing reserved
                continue
            if self.nonces.granted(row["key_id"], row["n"], row["total"]):
                log.warning(
                    "data key past half its nonce budget: rotate it soon",
                    key_id=row["key_id"],
                    sealed=row["total"],
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
        if key_id not in self._keys and key_id not in self._all and key_id not in self._refused:
            await self.refresh()  # created moments ago in another process?
        return self._key(key_id, purpose)

    # -- encryption ------------------------------------------------------------------------

    def encrypt(self, purpose: Purpose, plaintext: bytes, context: bytes) -> bytes:
        """Seal `plaintext` under the active key of `purpose`, bound to `context`.

        Raises:
            NonceBudgetExhausted: the key has sealed its budget (`signoff keys rotate`).
            NoNonceReservation: more seals since the last `await ring.fresh()` than it reserved.
        """
        loaded = self._key(self.active_key_id(purpose), purpose)
        aead = _aead_of(loaded)
        self.nonces.take(loaded.info.key_id, purpose)
        return seal(aead, purpose, loaded.info.key_id, plaintext, context)

    def decrypt(self, purpose: Purpose, sealed: bytes, context: bytes, where: str) -> bytes:
        """Open a sealed value; `where` names its place for the error if it does not open.

        Raises:
            DecryptionFailed: altered, or bound to another place.
            UnknownKey: the key it names is unknown or retired.
        """
        key_id = key_id_of(sealed)
        if key_id is None:
            raise UnknownKey("?", f"{where} is not a Signoff ciphertext")
        loaded = self._key(key_id, purpose)
        return open_sealed(_aead_of(loaded), purpose, key_id, sealed, context, where)

    async def decrypt_fresh(
        self, purpose: Purpose, sealed: bytes, context: bytes, where: str
    ) -> bytes:
        """`decrypt`, refreshing the cache first if the key is one it has not seen."""
        key_id = key_id_of(sealed)
        if key_id is not None:
            await self._key_fresh(key_id, purpose)
        return self.decrypt(purpose, sealed, context, where)

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
        (key id, hex). Only the cache: callers that may name a key it has not seen use
        `value_mac_fresh`.

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

    async def value_mac_fresh(self, message: bytes, key_id: str) -> str:
        """`value_mac` under `key_id`, refreshing the cache first if it has not seen the key."""
        await self._key_fresh(key_id, Purpose.VALUE_MAC)
        return self.value_mac(message, key_id)[1]

    def live_key_ids(self, purpose: Purpose) -> list[str]:
        """The keys of `purpose` that still open or verify: the active one first, then the
        decrypt-only ones, newest first."""
        live = [k.info for k in self._keys.values() if k.info.purpose is purpose]
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
        """Raise the ring's refusal of a signing key whose stored public key is not its own.

        Raises:
            PublicKeyMismatch: refused when the ring unwrapped it.
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

    def _decision_kek_id(self) -> str:
        """The KEK id that wraps the decision key, for errors (none yet: any will do)."""
        for info in self._all.values():
            if info.purpose is Purpose.DECISION_SIGNING and info.state is not KeyState.RETIRED:
                return info.kek_id
        return "none yet: any new KEK"

    # -- administration ----------------------------------------------------------------------

    async def init(self) -> list[str]:
        """Create an active key for every purpose that has none; return the new key ids."""
        created: list[str] = []
        async with self._admin() as conn:
            rows = await conn.fetch("SELECT purpose FROM data_keys WHERE state = 'active'")
            have = {Purpose(r["purpose"]) for r in rows}
            for purpose in self._creatable():
                if purpose not in have:
                    created.append((await self._create(conn, purpose))[0])
        await self.refresh()
        if created:
            log.info("data keys created", key_ids=created)
        return created

    async def rotate(self, purpose: Purpose) -> str:
        """Make a new active key for `purpose`; the old one becomes decrypt-only."""
        async with self._admin() as conn:
            key_id, old = await self._create(conn, purpose, rotate=True)
        await self.refresh()
        log.info("data key rotated", purpose=purpose, key_id=key_id, replaces=old)
        return key_id

    async def retire(self, key_id: str) -> None:
        """Retire a decrypt-only key: nothing encrypted under it can be read afterwards."""
        async with self._admin() as conn:
            row = await conn.fetchrow(
                "SELECT purpose, state FROM data_keys WHERE key_id = $1", key_id
            )
            if row is None:
                raise UnknownKey(key_id)
            if row["state"] == KeyState.RETIRED:
                raise KeyStateError(f"key {key_id} is already retired")
            if not await conn.fetchval(_RETIRE, key_id):
                raise KeyStateError(f"key {key_id} is not decrypt-only; rotate it out first")
            await self._record(conn, Purpose(row["purpose"]), "key.retired", {"key_id": key_id})
        await self.refresh()

    async def rewrap(self, new_kek: Kek) -> int:
        """Rewrap every data key under `new_kek`, in one transaction; return how many. The
        decision signing keys stay under the reviewer KEK."""
        if self.kek is None:
            raise KekMissing("(unknown)")
        async with self._admin() as conn:
            every = await conn.fetch(_SELECT_KEYS)
            rows = [r for r in every if r["purpose"] != Purpose.DECISION_SIGNING]
            for row in rows:
                info = _info(row)
                material = _material(self._unwrap(info, row["wrapped"]))
                context = _wrap_context(info.key_id, info.purpose)
                await conn.execute(
                    _REWRAP, info.key_id, new_kek.kek_id, new_kek.wrap(material, context)
                )
            for purpose in {Purpose(r["purpose"]) for r in rows}:
                await self._record(
                    conn, purpose, "key.rewrapped", {"from": self.kek.kek_id, "to": new_kek.kek_id}
                )
        self.kek = new_kek
        await self.refresh()
        return len(rows)

    async def _create(
        self, conn: asyncpg.Connection, purpose: Purpose, *, rotate: bool = False
    ) -> tuple[str, str | None]:
        """Make a key (with `rotate`, demoting the active one); return (key id, the demoted
        key's id). A signing key's event records its public key."""
        kek = self._kek_for(purpose)
        if kek is None and purpose is Purpose.DECISION_SIGNING:
            raise ReviewerKekMissing(self._decision_kek_id())
        if kek is None:
            raise KekMissing("(none yet: configure one)")
        key_id = f"{_PREFIX[purpose]}-{secrets.token_hex(8)}"
        public: bytes | None = None
        if purpose in SIGNING_PURPOSES:
            private = Ed25519PrivateKey.generate()
            material = private.private_bytes_raw()
            public = _raw_public(private.public_key())
        else:
            material = os.urandom(32)
        wrapped = kek.wrap(material, _wrap_context(key_id, purpose))
        args = (key_id, purpose, kek.kek_id, wrapped, public)
        replaces: str | None = await conn.fetchval(_ROTATE if rotate else _CREATE, *args)
        data: dict[str, Any] = {"key_id": key_id, "kek_id": kek.kek_id, "replaces": replaces}
        if public is not None:
            data["public_key"] = public_text(public)
        await self._record(conn, purpose, "key.rotated" if rotate else "key.created", data)
        return key_id, replaces

    async def _record(
        self, conn: asyncpg.Connection, purpose: Purpose, type_: str, data: dict[str, Any]
    ) -> None:
        """The one place key events are appended (`key.created`, `key.rotated`,
        `key.retired`, `key.rewrapped`): `signoff_append` on the key
        administrator's transaction."""
        stream = f"keys:{purpose}"
        journal = Journal(self.db)
        version = await journal.stream_version(stream, connection=conn)
        await journal.append(
            stream,
            [NewEvent(type_, data, actor="signoff")],
            expected_version=version,
            connection=conn,
        )

    @asynccontextmanager
    async def _admin(self) -> AsyncIterator[asyncpg.Connection]:
        """One transaction holding the key-administration lock: admin steps take turns."""
        async with self.db.transaction() as conn:
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _ADMIN_LOCK)
            yield conn


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


@lru_cache(maxsize=64)
def _public_key(raw: bytes) -> Ed25519PublicKey:
    """The loaded key of raw Ed25519 public key bytes (loading costs a tenth of a check)."""
    return Ed25519PublicKey.from_public_bytes(raw)
