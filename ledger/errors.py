"""Errors raised by the ledger core.

Every error is a `SignoffError`; each condition has its own subclass carrying the ids and values a
caller needs to react, so nobody has to parse a message.
"""

from __future__ import annotations

__all__ = [
    "ConfigurationError",
    "DatabaseUnavailable",
    "EmbeddedServerError",
    "InvalidEvent",
    "SchemaOutOfDate",
    "SignoffError",
    "VersionConflict",
]


class SignoffError(Exception):
    """Base of every error Signoff raises on purpose."""


class ConfigurationError(SignoffError):
    """A setting (database URL, key file, ...) is missing or malformed."""


class DatabaseUnavailable(SignoffError):
    """The database could not be reached or refused the connection."""

    def __init__(self, target: str, reason: str) -> None:
        super().__init__(f"cannot connect to PostgreSQL at {target}: {reason}")
        self.target = target
        self.reason = reason


class SchemaOutOfDate(SignoffError):
    """The database schema is not the revision this code expects."""

    def __init__(self, current: str | None, expected: str) -> None:
        shown = current or "empty"
        super().__init__(
            f"database schema is at revision {shown}, this code needs {expected}: "
            "run `signoff db upgrade`"
        )
        self.current = current
        self.expected = expected


class EmbeddedServerError(SignoffError):
    """The embedded PostgreSQL server could not be prepared or started."""


class InvalidEvent(SignoffError, ValueError):
    """An event or append request is malformed; nothing was written."""


class VersionConflict(SignoffError):
    """Another writer appended to the stream first; nothing was written."""

    def __init__(self, stream_id: str, expected_version: int, actual_version: int | None) -> None:
        actual = "unknown" if actual_version is None else str(actual_version)
        super().__init__(
            f"stream {stream_id!r}: expected version {expected_version}, found {actual}"
        )
        self.stream_id = stream_id
        self.expected_version = expected_version
        self.actual_version = actual_version
