"""Running multi-statement SQL (functions, triggers) from a revision in `migrations/versions`.

The revisions are files that alembic loads by path, not an importable package: Signoff installs
no top-level `migrations`, which would clash with an application's own."""

from __future__ import annotations

from alembic import op
from sqlalchemy.util import await_only

__all__ = ["execute_script"]


def execute_script(sql: str) -> None:
    """Run `sql`, which may hold several statements, in the migration's transaction.

    asyncpg prepares every statement SQLAlchemy sends, and a prepared statement holds one
    command; its simple-query `execute` runs a whole script, in the same transaction.
    """
    driver_connection = op.get_bind().connection.driver_connection
    if driver_connection is None:
        raise RuntimeError("the migration's connection is closed")
    await_only(driver_connection.execute(sql))
