"""Database access: the `Database` pool, the URL it connects to, the embedded PostgreSQL server,
LISTEN/NOTIFY listeners and the alembic migrations (`ledger.store.migrate`)."""

from .config import resolve_url
from .db import Database

__all__ = ["Database", "resolve_url"]
