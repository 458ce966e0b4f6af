"""Signoff's core: database access, the event journal, keys, the tool-call ledger and audit."""

from .canonical import canonical_json
from .config import resolve_url
from .db import Database
from .errors import (
    ConfigurationError,
    DatabaseUnavailable,
    EmbeddedServerError,
    InvalidEvent,
    SchemaOutOfDate,
    SignoffError,
    VersionConflict,
)
from .journal import Appended, BadEvent, Event, Journal, NewEvent, VerifyReport

__all__ = [
    "Appended",
    "BadEvent",
    "ConfigurationError",
    "Database",
    "DatabaseUnavailable",
    "EmbeddedServerError",
    "Event",
    "InvalidEvent",
    "Journal",
    "NewEvent",
    "SchemaOutOfDate",
    "SignoffError",
    "VerifyReport",
    "VersionConflict",
    "canonical_json",
    "resolve_url",
]

__version__ = "0.1.0"
