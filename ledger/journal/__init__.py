"""The event journal, the source of truth: append-only streams with optimistic versions, hash
chains over the canonical form (`ledger.canonical`), the global read order and verification."""

from .journal import (
    MAX_DATA_BYTES,
    MAX_EVENTS_PER_APPEND,
    Appended,
    BadEvent,
    Event,
    Journal,
    NewEvent,
    VerifyReport,
)

__all__ = [
    "MAX_DATA_BYTES",
    "MAX_EVENTS_PER_APPEND",
    "Appended",
    "BadEvent",
    "Event",
    "Journal",
    "NewEvent",
    "VerifyReport",
]
