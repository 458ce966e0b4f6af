"""Schema migrations (alembic), usable from code and from the `signoff db` commands."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

from ..errors import SchemaFromPreRelease

__all__ = [
    "alembic_config",
    "downgrade",
    "head_revision",
    "is_known_revision",
    "refuse_pre_release",
    "upgrade",
]


@cache
def _folder() -> Path:
    """The alembic folder: in an installed wheel, inside this package (the build maps the
    repository's `migrations/` there); in a checkout or an editable install, the repository's.
    It is read by path, never imported: an application may have a `migrations` package too."""
    here = Path(__file__).resolve().parent
    for folder in (here / "migrations", here.parents[1] / "migrations"):
        if (folder / "env.py").is_file():
            return folder
    raise FileNotFoundError(f"no migrations beside {here} nor in its source tree")


# The revision ids of the schema before it was squashed into the 0.1 baseline (none released).
PRE_RELEASE_REVISIONS = frozenset(f"{n:04d}" for n in range(1, 23))


def refuse_pre_release(current: str | None) -> None:
    """Raise `SchemaFromPreRelease` for a database left at a pre-release revision id."""
    if current in PRE_RELEASE_REVISIONS:
        raise SchemaFromPreRelease(current)


def alembic_config(url: str) -> Config:
    """An alembic configuration for `url` that finds our migrations wherever we are installed."""
    config = Config()
    config.set_main_option("script_location", str(_folder()))
    config.attributes["signoff_url"] = url
    return config


@cache
def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config("")).get_current_head()
    if head is None:
        raise RuntimeError(f"no migrations found in {_folder()}")
    return head


def is_known_revision(revision: str) -> bool:
    """Whether `revision` is one of this code's migrations (a database at an unknown one was
    migrated by another version of Signoff)."""
    try:
        script = ScriptDirectory.from_config(alembic_config("")).get_revision(revision)
    except Exception:  # alembic's "no such revision" errors have no common base worth naming
        return False
    return script is not None and script.revision == revision  # alembic matches prefixes too


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at `url` up to `revision` (blocking; call outside an event loop)."""
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str) -> None:
    """Migrate the database at `url` down to `revision` (blocking; call outside an event loop)."""
    command.downgrade(alembic_config(url), revision)
