"""The reviewer side's KEK for the commands that sign: `signoff serve`, `approvals decide` and
`approvals cancel`.

The configured one (`SIGNOFF_REVIEWER_KEK`, `SIGNOFF_REVIEWER_KEK_FILE`) when set; else the kept
file of the KEK that wraps the database's decision key, `<embedded dir>/../reviewer-keks/<KEK
id>`, where `signoff demo` keeps the one it made (`ledger.keys.kek_files`). It is found by the
id the decision key names, never guessed. Only these reviewer-side commands look there: the key
ring itself, and so every agent worker, never does, so a worker never signs a decision.
"""

from __future__ import annotations

import dataclasses

from ledger.errors import ConfigurationError
from ledger.keys import KeyRing, KeyState, LocalKek, Purpose
from ledger.keys.kek_files import kept_kek, kept_kek_folder
from ledger.store import Database
from ledger.store.settings import Settings

__all__ = ["signing_ring", "with_reviewer_kek"]


async def signing_ring(db: Database) -> KeyRing:
    """`db`'s key ring with the reviewer KEK (configured, else kept), so that it signs.

    Raises:
        ConfigurationError: the database has a decision key, no reviewer KEK is configured and
            none is kept for it (the message names the KEK and the file looked for).
        KekMissing, KekMismatch: as `KeyRing.open`.
    """
    ring = await KeyRing.open(db, create_missing=False)
    if ring.can_sign_decisions:
        return ring
    kept = _kept(db.settings, ring)
    if kept is None:
        return ring  # no decision key yet: signing says what to set
    return await KeyRing.open(db, ring.kek, reviewer_kek=kept, create_missing=False)


async def with_reviewer_kek(settings: Settings) -> Settings:
    """`settings` with the reviewer KEK: configured, else kept for the database's decision key
    (which this reads from the database); unchanged when it has no decision key yet.

    Raises:
        ConfigurationError: as `signing_ring`.
    """
    if settings.reviewer_kek is not None:
        return settings
    async with await Database.from_settings(settings, pool_size=1) as db:
        kept = _kept(settings, await KeyRing.open(db, create_missing=False))
    return settings if kept is None else dataclasses.replace(settings, reviewer_kek=kept)


def _kept(settings: Settings, ring: KeyRing) -> LocalKek | None:
    """The kept reviewer KEK of the KEK that wraps `ring`'s decision key; None when there is no
    decision key."""
    wrapping = sorted(
        k.kek_id
        for k in ring.all_keys()
        if k.purpose is Purpose.DECISION_SIGNING and k.state is KeyState.ACTIVE
    )
    if not wrapping:
        return None
    needed = wrapping[0]
    kept = kept_kek(settings, needed, reviewer=True)
    if kept is None:
        path = kept_kek_folder(settings, reviewer=True) / needed
        raise ConfigurationError(
            f"signing needs the reviewer-side KEK {needed}, which wraps this database's "
            f"decision key: set SIGNOFF_REVIEWER_KEK_FILE to it (no kept file {path})"
        )
    return kept
