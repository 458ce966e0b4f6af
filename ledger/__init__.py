"""Signoff's core: database access, the event journal, keys, the tool-call ledger and audit."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .canonical import canonical_json
    from .config import resolve_url
    from .db import Database
    from .errors import (
        AppendOnlyViolation,
        ConfigurationError,
        DatabaseError,
        DatabaseUnavailable,
        DeadlockDetected,
        EmbeddedServerError,
        InvalidEvent,
        InvalidJson,
        SchemaOutOfDate,
        SerializationFailure,
        SignoffError,
        UniqueViolation,
        VersionConflict,
    )
    from .journal import Appended, BadEvent, Event, Journal, NewEvent, VerifyReport

__all__ = [
    "AppendOnlyViolation",
    "Appended",
    "BadEvent",
    "ConfigurationError",
    "Database",
    "DatabaseError",
    "DatabaseUnavailable",
    "DeadlockDetected",
    "EmbeddedServerError",
    "Event",
    "InvalidEvent",
    "InvalidJson",
    "Journal",
    "NewEvent",
    "SchemaOutOfDate",
    "SerializationFailure",
    "SignoffError",
    "UniqueViolation",
    "VerifyReport",
    "VersionConflict",
    "canonical_json",
    "resolve_url",
]

__version__ = "0.1.0"

# Where each public name lives. They are imported on first use so that `python -m ledger.verifier`
# (the auditors' offline tool) does not load SQLAlchemy and asyncpg through this package.
_HOMES = {
    "canonical_json": "canonical",
    "resolve_url": "config",
    "Database": "db",
    **dict.fromkeys(
        [
            "AppendOnlyViolation",
            "ConfigurationError",
            "DatabaseError",
            "DatabaseUnavailable",
            "DeadlockDetected",
            "EmbeddedServerError",
            "InvalidEvent",
            "InvalidJson",
            "SchemaOutOfDate",
            "SerializationFailure",
            "SignoffError",
            "UniqueViolation",
            "VersionConflict",
        ],
        "errors",
    ),
    **dict.fromkeys(
        ["Appended", "BadEvent", "Event", "Journal", "NewEvent", "VerifyReport"], "journal"
    ),
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f".{home}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value
