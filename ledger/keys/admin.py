"""Key administration: create, rotate, retire and rewrap data keys (`signoff keys ...`).

Serialized by one advisory lock; writes `data_keys` only through the database's key functions
and records each step in the journal (stream `keys:<purpose>`; never the key material) in the
same transaction. A signing key's `key.created` event records its public key (hex), so auditors
and `.public` can check `data_keys` against the journal.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ..errors import (
    KekMissing,
    KeyStateError,
    ReviewerKekMissing,
    UnknownKey,
)
from ..journal import Journal, NewEvent
from . import _sql
from .cache import (
    _ADMIN_LOCK,
    _PREFIX,
    SIGNING_PURPOSES,
    KeyCache,
    KeyState,
    Purpose,
    _info,
    _material,
    _raw_public,
    _wrap_context,
    log,
)
from .kek import Kek
from .public import public_text

__all__ = ["KeyAdmin"]


class KeyAdmin(KeyCache):
    """Creating, rotating, retiring and rewrapping keys, as a key administrator."""

    async def init(self) -> list[str]:
        """Create an active key for every purpose that has none; return the new key ids."""
        created: list[str] = []
        async with self._admin() as conn:
            rows = await conn.fetch(_sql.ACTIVE_PURPOSES)
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
        """Retire a decrypt-only key: it never signs, MACs or encrypts again. A sealing key
        (checkpoint, result) opens nothing afterwards; a MAC or signing key still verifies
        what it made, so the journal it vouched for stays verifiable."""
        async with self._admin() as conn:
            row = await conn.fetchrow(_sql.PURPOSE_AND_STATE, key_id)
            if row is None:
                raise UnknownKey(key_id)
            if row["state"] == KeyState.RETIRED:
                raise KeyStateError(f"key {key_id} is already retired")
            if not await conn.fetchval(_sql.RETIRE, key_id):
                raise KeyStateError(f"key {key_id} is not decrypt-only; rotate it out first")
            await self._record(conn, Purpose(row["purpose"]), "key.retired", {"key_id": key_id})
        await self.refresh()

    async def rewrap(self, new_kek: Kek) -> int:
        """Rewrap every data key under `new_kek`, in one transaction; return how many. The
        decision signing keys stay under the reviewer KEK."""
        if self.kek is None:
            raise KekMissing("(unknown)")
        async with self._admin() as conn:
            every = await conn.fetch(_sql.SELECT_KEYS)
            rows = [r for r in every if r["purpose"] != Purpose.DECISION_SIGNING]
            for row in rows:
                info = _info(row)
                material = _material(self._unwrap(info, row["wrapped"]))
                context = _wrap_context(info.key_id, info.purpose)
                await conn.execute(
                    _sql.REWRAP, info.key_id, new_kek.kek_id, new_kek.wrap(material, context)
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
        replaces: str | None = await conn.fetchval(_sql.ROTATE if rotate else _sql.CREATE, *args)
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
