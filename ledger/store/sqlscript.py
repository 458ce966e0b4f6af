"""Helpers for the revision files in `migrations/versions`: multi-statement SQL (functions,
triggers) and the SQL of an earlier revision."""

from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path
from types import ModuleType

from alembic import op
from sqlalchemy.util import await_only

__all__ = ["execute_script", "load_revision"]


def execute_script(sql: str) -> None:
    """Run `sql`, which may hold several statements, in the migration's transaction.

    asyncpg prepares every statement SQLAlchemy sends, and a prepared statement holds one
    command; its simple-query `execute` runs a whole script, in the same transaction.
    """
    driver_connection = op.get_bind().connection.driver_connection
    if driver_connection is None:
        raise RuntimeError("the migration's connection is closed")
    await_only(driver_connection.execute(sql))


def load_revision(beside: str, name: str) -> ModuleType:
    """The revision file `name` (without `.py`) in the folder of `beside` (a revision's
    `__file__`), for the SQL a later revision reuses or restores.

    The revisions are files that alembic loads by path, not an importable package: Signoff
    installs no top-level `migrations`, which would clash with an application's own.
    """
    return _load(Path(beside).resolve().with_name(f"{name}.py"))


@cache  # one module per file, as an import would give: a revision may be asked for twice
def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"signoff_revision_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the revision file {path}", path=str(path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
