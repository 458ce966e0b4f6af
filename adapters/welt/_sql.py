"""The Welt adapter's SQL: a session advisory lock per LangGraph thread, held while one process
resumes it (closing the connection releases it, even after a crash)."""

from __future__ import annotations

TRY_LOCK_THREAD = "SELECT pg_try_advisory_lock(hashtextextended($1, 0))"
