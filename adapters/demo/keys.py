"""The demo's keys: the workers' key ring, opened as every worker opens it, and the reviewer KEK
this process signs decisions with (see `flow`'s docstring). KEK files the demo keeps are the
library's (`ledger.keys.kek_files`), which every command and worker finds by their KEK id."""

from __future__ import annotations

from dataclasses import dataclass, field

from ledger.errors import KekMissing
from ledger.keys import KeyRing, KeyState, LocalKek, Purpose
from ledger.keys.kek_files import kept_kek, kept_kek_folder, new_kept_kek
from ledger.store import Database
from ledger.store.settings import Settings

from .screen import DemoFailed

__all__ = ["Keys", "demo_keys"]


@dataclass
class Keys:
    """The key ring, what the workers need added to the environment to open it, and a note."""

    ring: KeyRing
    env: dict[str, str] = field(default_factory=dict)
    note: str = ""
    reviewer_kek: LocalKek | None = None  # this process's: it decides, the workers never do


async def demo_keys(db: Database, reviewer_kek: LocalKek | None) -> Keys:
    """The workers' key ring and the reviewer KEK this process signs with (see the module's
    docstring): `reviewer_kek` when one is configured. Makes the keys a new database lacks,
    the decision key too (a key administrator's job, and the reviewer side's: the owner's)."""
    keys = await _worker_keys(db)
    if reviewer_kek is None:
        reviewer_kek, made = _reviewer_kek(db.settings, keys.ring)
        # Say where it is: `signoff serve` and `approvals decide` find it there too.
        path = kept_kek_folder(db.settings, reviewer=True) / reviewer_kek.kek_id
        keys.note += f"\nreviewer KEK {path}{', made now' if made else ''}"
    keys.reviewer_kek = reviewer_kek
    await KeyRing.open(db, keys.ring.kek, reviewer_kek=keys.reviewer_kek)
    return keys


def _reviewer_kek(settings: Settings, ring: KeyRing) -> tuple[LocalKek, bool]:
    """The kept reviewer KEK that wraps this database's decision key, made now if it has none
    (and whether it was)."""
    wrapping = {
        k.kek_id
        for k in ring.all_keys()
        if k.purpose is Purpose.DECISION_SIGNING and k.state is not KeyState.RETIRED
    }
    if not wrapping:
        return new_kept_kek(settings, reviewer=True)[1], True
    kek = kept_kek(settings, min(wrapping), reviewer=True)
    if kek is None:
        raise DemoFailed(
            f"this database's decisions are signed by a key wrapped by reviewer KEK "
            f"{min(wrapping)}: set SIGNOFF_REVIEWER_KEK_FILE to it"
        )
    return kek, False


async def _worker_keys(db: Database) -> Keys:
    """The key ring, opened the way every worker will open it (see the module's docstring)."""
    settings = db.settings
    if settings.kek is not None:
        ring = await KeyRing.open(db)
        source = (settings.kek.source or "").partition("=")[0]  # the variable, not the path
        return Keys(ring, note=f"wrapped by KEK {_kek_id(ring)} from {source}")
    if (local := settings.embedded_kek_file) is not None:
        ring = await KeyRing.open(db)  # creates the local KEK file on first use, and says so
        return Keys(ring, note=f"wrapped by the embedded server's KEK file {local}")
    try:  # the library's resolver finds the kept KEK file of the KEK the keys need
        found = await KeyRing.open(db, create_missing=False)
    except KekMissing as e:
        raise DemoFailed(
            f"this database's data keys are wrapped by KEK {e.needed}: set SIGNOFF_KEK "
            "(base64 of 32 bytes) or SIGNOFF_KEK_FILE to it"
        ) from None
    if isinstance(found.kek, LocalKek):
        kek = found.kek
        path = kept_kek_folder(settings) / kek.kek_id
        note = f"wrapped by {path}\n(the demo's KEK file for this database: no KEK is configured)"
    else:  # no data keys yet: make a KEK for this database, and keep it
        path, kek = new_kept_kek(settings)
        note = (
            f"wrapped by {path}, made now: no KEK is configured\n"
            f"(back it up; SIGNOFF_KEK_FILE={path} lets other commands use it)"
        )
    ring = await KeyRing.open(db, kek)
    return Keys(ring, {"SIGNOFF_KEK_FILE": str(path)}, note)


def _kek_id(ring: KeyRing) -> str:
    return ring.kek.kek_id if ring.kek is not None else "(none)"
