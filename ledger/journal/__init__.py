"""The event journal, the source of truth: append-only streams with optimistic versions, hash
chains over the canonical form (`ledger.canonical`), the global read order and verification;
and projections (`projection`): tables folded from streams, written in the same statement as
their events and checked against the journal."""

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
from .projection import Fact, Projection, fold, verify_projection

__all__ = [
    "MAX_DATA_BYTES",
    "MAX_EVENTS_PER_APPEND",
    "Appended",
    "BadEvent",
    "Event",
    "Fact",
    "Journal",
    "NewEvent",
    "Projection",
    "VerifyReport",
    "fold",
    "verify_projection",
]
