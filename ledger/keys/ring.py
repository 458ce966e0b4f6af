"""The key ring: data keys in the database, wrapped by the KEK, cached in every process.

`KeyRing` composes three parts, one module each: the per-process cache (`cache`: loading,
refreshing within `refresh_seconds`, nonce reservations), the keys' use (`use`: sealing and
opening, MACs, signatures) and their administration (`admin`: create, rotate, retire, rewrap,
as `signoff keys ...` runs them).

Sealing needs no ritual: the asynchronous operations ready the cache themselves, and the
synchronous ones run inside `async with ring.sealing():`, which refreshes a stale cache and
reserves nonces for the seals that follow (`budget`).

Two KEKs. The worker KEK wraps every key but one: the `decision_signing` key, which signs
reviewers' decisions, is wrapped by the reviewer-side KEK (`SIGNOFF_REVIEWER_KEK[_FILE]`), which
agent workers never hold. A ring opened without it loads that key's public half only: it
verifies decisions and cannot sign them (`ReviewerKekMissing`), and it never creates one.

A sealing key that passes three quarters of its nonce budget (`budget.ROTATE_AT`) is rotated by
the first ring that sees it whose login may rotate keys (the owner, a key administrator); the
others log an error that says to.
"""

from __future__ import annotations

from ..errors import NoActiveKey, PermissionDenied, SignoffError
from ..store import Database
from . import _sql
from .admin import KeyAdmin
from .cache import SIGNING_PURPOSES, KeyCache, KeyInfo, KeyState, Purpose, log
from .kek import Kek
from .kek_files import resolve_kek
from .use import KeyUse

__all__ = ["SIGNING_PURPOSES", "KeyCache", "KeyInfo", "KeyRing", "KeyState", "Purpose"]


class KeyRing(KeyUse, KeyAdmin):
    """Data keys for one database, usable from any number of processes."""

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

    async def _replace_worn(self) -> None:
        """Rotate the keys this process saw pass three quarters of their budget, when its
        login may (else say to, as every ring does). A key another process rotated meanwhile
        is left alone."""
        worn, self._worn = self._worn, set()
        for key_id in worn:
            info = self._all.get(key_id)
            if info is None or info.state is not KeyState.ACTIVE:
                continue
            if not await self._may_rotate(info.purpose):
                self._tell_worn(key_id)
                continue
            try:
                new_key = await self._rotate_worn(info.purpose, key_id)
            except SignoffError as e:
                log.error(
                    "data key near its nonce budget not rotated: rotate it now",
                    key_id=key_id,
                    error_type=type(e).__name__,
                )
                continue
            if new_key is not None:
                log.warning(
                    "data key near its nonce budget rotated",
                    purpose=str(info.purpose),
                    key_id=new_key,
                    replaces=key_id,
                )

    async def _may_rotate(self, purpose: Purpose) -> bool:
        if self._kek_for(purpose) is None:
            return False
        async with self.db.connection() as conn:
            return bool(await conn.fetchval(_sql.MAY_ROTATE))

    async def _rotate_worn(self, purpose: Purpose, key_id: str) -> str | None:
        """Rotate `purpose` if `key_id` is still its active key; the new key's id, or None."""
        async with self._admin() as conn:
            if await conn.fetchval(_sql.SELECT_ACTIVE, str(purpose)) != key_id:
                return None
            new_key, _ = await self._create(conn, purpose, rotate=True)
        await self.refresh()
        return new_key
