"""Which KEK opens a database's keys when the caller names none: the one resolver the key ring
uses, and so every command, `signoff serve`, the demo and its workers.

In order: the configured KEK (`SIGNOFF_KEK`, `SIGNOFF_KEK_FILE`, read by the settings); else, on
the embedded server, its home's `kek` file (made for a database without keys yet); else, for any
database, a kept KEK file named by the KEK id the database's keys need, in the folder beside the
embedded server's home (`<home>/../keks/<kek id>`, where `signoff demo` keeps the KEK it made for a
database of yours). A kept file is found by the id the keys name, never guessed, and never made
here: only `new_kept_kek` makes one, when a caller decides a database gets a KEK of its own.

The reviewer side's KEK files are kept the same way in `<home>/../reviewer-keks/`.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import KekMissing
from .kek import Kek, LocalKek, create_kek_file, embedded_kek

if TYPE_CHECKING:
    from ..store.settings import Settings

__all__ = ["kept_kek", "kept_kek_folder", "new_kept_kek", "resolve_kek"]


def kept_kek_folder(settings: Settings, *, reviewer: bool = False) -> Path:
    """The folder of kept KEK files, each named by its KEK id."""
    return settings.embedded_home.parent / ("reviewer-keks" if reviewer else "keks")


def kept_kek(settings: Settings, kek_id: str, *, reviewer: bool = False) -> LocalKek | None:
    """The kept KEK file of `kek_id`, or None when there is none (or it holds another KEK)."""
    path = kept_kek_folder(settings, reviewer=reviewer) / kek_id
    if not path.is_file():
        return None
    kek = LocalKek.from_file(path)
    if kek.kek_id != kek_id:  # renamed by hand: not the KEK its name promises
        return None
    kek.source = f"the kept KEK file {path}"
    return kek


def new_kept_kek(settings: Settings, *, reviewer: bool = False) -> tuple[Path, LocalKek]:
    """A new KEK in a new kept file (mode 0600), named by its KEK id once written, so that a
    process never finds a half-written one."""
    folder = kept_kek_folder(settings, reviewer=reviewer)
    draft = folder / f"new-{uuid.uuid4().hex}"
    create_kek_file(draft)
    kek = LocalKek.from_file(draft)
    path = folder / kek.kek_id
    draft.rename(path)
    kek.source = f"the kept KEK file {path}"
    return path, kek


async def resolve_kek(settings: Settings, check: Callable[[], Awaitable[None]]) -> Kek | None:
    """The KEK for a database of `settings` (see the module's docstring); None when no KEK is
    configured and the database has no keys yet. `check` loads the keys without a KEK: it
    raises `KekMissing` (naming the KEK needed) when keys exist.

    Raises:
        KekMissing: keys exist and no KEK is configured, kept, or the embedded server's.
    """
    if settings.kek is not None:
        return settings.kek
    local = settings.embedded_kek_file
    if local is not None:
        if not local.exists():
            # A new local KEK only for a database without keys: one beside keys wrapped by a
            # lost KEK would unwrap nothing, and hide which KEK is needed.
            await check()
        return embedded_kek(local)
    try:
        await check()
    except KekMissing as e:
        kept = kept_kek(settings, e.needed)
        if kept is None:
            raise
        return kept
    return None
