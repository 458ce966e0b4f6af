"""Errors raised by the ledger core.

Every error is a `SignoffError`; each condition has its own subclass carrying the ids and values a
caller needs to react, so nobody has to parse a message.
"""

from __future__ import annotations

__all__ = [
    "CallStateError",
    "ClaimRaced",
    "ConfigurationError",
    "DatabaseUnavailable",
    "DecryptionFailed",
    "DigestError",
    "DigestMismatch",
    "EmbeddedServerError",
    "InvalidEvent",
    "InvalidJson",
    "InvalidToolCall",
    "KekMismatch",
    "KekMissing",
    "KeyRingError",
    "KeyStateError",
    "NoActiveKey",
    "NotInDigest",
    "ProjectionError",
    "ResultNotSerializable",
    "ResultTampered",
    "SchemaOutOfDate",
    "SignoffError",
    "UnknownCall",
    "UnknownEventType",
    "UnknownKey",
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


class InvalidJson(SignoffError, ValueError):
    """A value cannot be stored as canonical JSON (see `ledger.limits`); nothing was written.
    The message says where in the value and why."""

    def __init__(self, problem: str) -> None:
        super().__init__(f"not storable as JSON: {problem}")
        self.problem = problem


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


class ProjectionError(SignoffError, ValueError):
    """A stream's events do not fold into a projection row (an event before the stream's first,
    or one the projection does not know)."""

    def __init__(self, stream_id: str, problem: str) -> None:
        super().__init__(f"{stream_id}: {problem}")
        self.stream_id = stream_id


class UnknownEventType(ProjectionError):
    """The stream holds an event type its projection has no rule for."""

    def __init__(self, stream_id: str, event_type: str) -> None:
        super().__init__(stream_id, f"unknown event type {event_type!r}")
        self.event_type = event_type


class KeyRingError(SignoffError):
    """Base of the key ring's errors."""


class KekMissing(KeyRingError):
    """No key-encryption key is configured, but data keys exist that need one (or are to be
    made: `needed` then starts with "(")."""

    def __init__(self, needed: str) -> None:
        if needed.startswith("("):  # no data keys yet: any new KEK will do
            message = (
                "no key-encryption key configured (neither SIGNOFF_KEK nor SIGNOFF_KEK_FILE is "
                "set): make one with `signoff keys new-kek --out FILE`, then export "
                "SIGNOFF_KEK_FILE=FILE"
            )
        else:
            message = (
                f"no key-encryption key configured (neither SIGNOFF_KEK nor SIGNOFF_KEK_FILE is "
                f"set); the data keys are wrapped by KEK {needed}: set SIGNOFF_KEK_FILE to the "
                "file that holds it (or SIGNOFF_KEK to its base64); a new KEK from `signoff keys "
                "new-kek` cannot open them"
            )
        super().__init__(message)
        self.needed = needed


class KekMismatch(KeyRingError):
    """The configured key-encryption key is not the one that wrapped the data keys."""

    def __init__(self, needed: str, configured: str, source: str | None = None) -> None:
        where = source or "SIGNOFF_KEK / SIGNOFF_KEK_FILE"
        super().__init__(
            f"the data keys are wrapped by KEK {needed}, but the configured KEK is {configured} "
            f"(from {where}): point SIGNOFF_KEK_FILE (or SIGNOFF_KEK) at KEK {needed}; to move "
            "the keys to a new KEK, run `signoff keys rewrap` with the old one configured"
        )
        self.needed = needed
        self.configured = configured
        self.source = source


class UnknownKey(KeyRingError):
    """A ciphertext, MAC or signature names a key id the key ring does not have."""

    def __init__(self, key_id: str, reason: str = "no such key") -> None:
        super().__init__(f"key {key_id!r}: {reason}")
        self.key_id = key_id
        self.reason = reason


class NoActiveKey(KeyRingError):
    """No active key exists for a purpose (run `signoff keys init`)."""

    def __init__(self, purpose: str) -> None:
        super().__init__(f"no active {purpose} key: run `signoff keys init`")
        self.purpose = purpose


class DecryptionFailed(KeyRingError):
    """A ciphertext did not decrypt: altered, or moved from where it was written."""

    def __init__(self, key_id: str, context: str) -> None:
        super().__init__(
            f"ciphertext under key {key_id!r} does not belong to {context} "
            "(altered, or copied from another row)"
        )
        self.key_id = key_id
        self.context = context


class KeyStateError(KeyRingError):
    """A key operation is not allowed in the key's current state."""


class InvalidToolCall(SignoffError, ValueError):
    """A tool call is malformed (empty ids, arguments that are not a JSON object, a call id
    reused with other arguments); nothing was recorded."""


class ClaimRaced(SignoffError):
    """Another process recorded the same call's intent first; look again (replay or wait).

    Raised inside the intent's transaction (by the ledger, or by a gate that finds its approval
    consumed by this very call) so the transaction rolls back whole.
    """


class ResultNotSerializable(SignoffError, TypeError):
    """A tool returned a value that is not JSON; no outcome was recorded."""


class UnknownCall(SignoffError):
    def __init__(self, run_id: str, call_id: str) -> None:
        super().__init__(f"no tool call {call_id!r} in run {run_id!r}")
        self.run_id = run_id
        self.call_id = call_id


class CallStateError(SignoffError):
    """The operation does not fit the call's status (e.g. resolving a call that finished)."""


class ResultTampered(SignoffError):
    """A stored result no longer matches the digest the journal recorded for it."""


class DigestError(SignoffError):
    """Base of the errors of digests and proofs."""


class DigestMismatch(DigestError):
    """The database no longer holds the events a digest committed to."""

    def __init__(self, problem: str) -> None:
        super().__init__(f"the database does not match the digest: {problem}")
        self.problem = problem


class NotInDigest(DigestError):
    """No event at that position is among the events a digest covers."""

    def __init__(self, position: int, tree_size: int) -> None:
        super().__init__(f"no event at position {position} among the {tree_size} the digest covers")
        self.position = position
        self.tree_size = tree_size
