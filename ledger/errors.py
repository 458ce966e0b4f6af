"""Errors raised by the ledger core.

Every error is a `SignoffError`; each condition has its own subclass carrying the ids and values a
caller needs to react, so nobody has to parse a message.

Errors the database raises are typed at one boundary (`Database.connection()`): each
`DatabaseError` subclass registers the SQLSTATEs it stands for (`class X(DatabaseError,
code="23505")`; a two-character code stands for a whole class), `lookup` finds the class of a
code, and `translate` turns a driver's error into its typed error. Our own functions raise
`SG4xx` codes with their fields as a JSON object in DETAIL. This module imports only the
standard library (the offline verifier uses it), so driver errors are read by their attributes.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

__all__ = [
    "AppendInSavepoint",
    "AppendOnlyViolation",
    "CallStateError",
    "CallTampered",
    "ClaimRaced",
    "ConfigurationError",
    "DatabaseError",
    "DatabaseUnavailable",
    "DeadlockDetected",
    "DecryptionFailed",
    "DigestError",
    "DigestMismatch",
    "EmbeddedServerError",
    "EventNotPermitted",
    "HistoryLost",
    "HistoryMoved",
    "InvalidEvent",
    "InvalidJson",
    "InvalidToolCall",
    "KekMismatch",
    "KekMissing",
    "KeyRingError",
    "KeyStateError",
    "LeaseHeld",
    "LeaseLost",
    "NoActiveKey",
    "NoNonceReservation",
    "NonceBudgetExhausted",
    "NotInDigest",
    "PermissionDenied",
    "PoolerModeUnsupported",
    "ProjectionError",
    "PublicKeyMismatch",
    "PublicKeyUnrecorded",
    "ReadOnlyDatabase",
    "ResultNotSerializable",
    "ResultTampered",
    "ReviewerKekMissing",
    "RowOutOfStep",
    "SchemaFromPreRelease",
    "SchemaOutOfDate",
    "SerializationFailure",
    "SignoffError",
    "UniqueViolation",
    "UnknownCall",
    "UnknownEventType",
    "UnknownKey",
    "VersionConflict",
    "lookup",
    "registered",
    "translate",
]


class SignoffError(Exception):
    """Base of every error Signoff raises on purpose."""


class ConfigurationError(SignoffError):
    """A setting (database URL, key file, ...) is missing or malformed."""


class PoolerModeUnsupported(ConfigurationError):
    """The database URL leads through a connection pooler that hands one client's statements to
    several server sessions (PgBouncer's `pool_mode = transaction` or `statement`). Signoff keeps
    state in a server session (each process's LISTEN, asyncpg's prepared statements), so it needs
    session pooling; it refuses before it reads or writes anything. `mode` is what the pooler
    showed: "transaction" (sessions handed between clients) or "statement" (no transaction
    block allowed)."""

    def __init__(self, target: str, mode: str) -> None:
        super().__init__(
            f"{target} leads through a connection pooler in {mode} mode; Signoff needs session "
            "pooling (pool_mode = session), as its LISTEN/NOTIFY listeners and prepared "
            "statements live in one server session: use a session-mode pool or connect directly"
        )
        self.target = target
        self.mode = mode


_REGISTRY: dict[str, type[DatabaseError]] = {}


class DatabaseError(SignoffError):
    """A statement failed in the database for a reason callers may act on.

    `sqlstate` is the server's code (None when the error came from the client side, e.g. a
    socket). `retryable`: the transaction was rolled back whole and running it again may
    succeed.
    """

    sqlstate: str | None = None
    retryable: ClassVar[bool] = False

    def __init_subclass__(cls, code: str | tuple[str, ...] = (), **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        codes = (code,) if isinstance(code, str) else code
        for each in codes:
            if len(each) not in (2, 5):
                raise TypeError(f"{cls.__name__}: {each!r} is not an SQLSTATE or SQLSTATE class")
            if each in _REGISTRY:
                raise TypeError(f"SQLSTATE {each} is registered to {_REGISTRY[each].__name__}")
            _REGISTRY[each] = cls
        if len(codes) == 1 and len(codes[0]) == 5:
            cls.sqlstate = codes[0]  # also when raised by hand

    def __init__(self, message: str, *, sqlstate: str | None = None) -> None:
        super().__init__(message)
        if sqlstate is not None:
            self.sqlstate = sqlstate

    @classmethod
    def from_driver(cls, error: BaseException, sqlstate: str, target: str) -> DatabaseError:
        """The typed error for a driver's `error` with this class's `sqlstate` (subclasses
        with fields read them here, from the error's attributes or its JSON DETAIL)."""
        return cls(_described(error, sqlstate), sqlstate=sqlstate)


def lookup(sqlstate: str) -> type[DatabaseError] | None:
    """The typed error registered for `sqlstate`, or for its class (its first two characters)."""
    return _REGISTRY.get(sqlstate) or _REGISTRY.get(sqlstate[:2])


def registered() -> dict[str, type[DatabaseError]]:
    """Every registered SQLSTATE (or class) and its typed error."""
    return dict(_REGISTRY)


def translate(
    error: BaseException, *, target: str = "PostgreSQL", connection_closed: bool = False
) -> SignoffError | None:
    """The typed error for a driver's `error`, or None when it has none (re-raise it as is).

    Args:
        target: where the database is (a masked URL), for `DatabaseUnavailable`.
        connection_closed: the connection `error` came from is closed (the driver's
            "connection is closed" errors carry no SQLSTATE).
    """
    if isinstance(error, SignoffError):
        return None
    sqlstate = getattr(error, "sqlstate", None)
    if isinstance(sqlstate, str) and (typed := lookup(sqlstate)) is not None:
        return typed.from_driver(error, sqlstate, target)
    if isinstance(error, TimeoutError):  # a slow statement, not a lost connection
        return None
    if isinstance(error, OSError) or connection_closed:  # reset, broken pipe, closed
        return DatabaseUnavailable(target, str(error) or type(error).__name__)
    return None


def _described(error: BaseException, sqlstate: str) -> str:
    """The server's message (never its DETAIL, which may quote the values) and the SQLSTATE."""
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    return f"{text} (SQLSTATE {sqlstate})"


def _fields(error: BaseException) -> dict[str, Any]:
    """The JSON object our own functions put in DETAIL ({} when there is none)."""
    try:
        fields = json.loads(getattr(error, "detail", None) or "{}")
    except ValueError:
        return {}
    return fields if isinstance(fields, dict) else {}


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class DatabaseUnavailable(DatabaseError, code=("08", "57P01", "57P02", "57P03")):
    """The database could not be reached, refused the connection, or the connection was lost
    (class 08, the server shutting down or restarting, a terminated backend, a socket error).
    Whether a write in flight was committed is unknown."""

    def __init__(self, target: str, reason: str, *, sqlstate: str | None = None) -> None:
        super().__init__(f"cannot connect to PostgreSQL at {target}: {reason}", sqlstate=sqlstate)
        self.target = target
        self.reason = reason

    @classmethod
    def from_driver(cls, error: BaseException, sqlstate: str, target: str) -> DatabaseError:
        return cls(target, _described(error, sqlstate), sqlstate=sqlstate)


class UniqueViolation(DatabaseError, code="23505"):
    """A row with the same key exists (`constraint` says which key); nothing was written."""

    def __init__(
        self, message: str, *, constraint: str | None = None, table: str | None = None
    ) -> None:
        super().__init__(message)
        self.constraint = constraint
        self.table = table

    @classmethod
    def from_driver(cls, error: BaseException, sqlstate: str, target: str) -> DatabaseError:
        return cls(
            _described(error, sqlstate),
            constraint=getattr(error, "constraint_name", None),
            table=getattr(error, "table_name", None),
        )


class SerializationFailure(DatabaseError, code="40001"):
    """The transaction lost a race with a concurrent one and was rolled back: run it again."""

    retryable = True


class DeadlockDetected(SerializationFailure, code="40P01"):
    """The transaction was chosen to break a deadlock and was rolled back: run it again."""


class AppendOnlyViolation(DatabaseError, code="SG403"):
    """A change to append-only history (`operation` on `table`) was refused."""

    def __init__(self, message: str, *, table: str | None, operation: str | None) -> None:
        super().__init__(message)
        self.table = table
        self.operation = operation

    @classmethod
    def from_driver(cls, error: BaseException, sqlstate: str, target: str) -> DatabaseError:
        fields = _fields(error)
        table, operation = fields.get("table"), fields.get("operation")
        return cls(
            _described(error, sqlstate),
            table=table if isinstance(table, str) else None,
            operation=operation if isinstance(operation, str) else None,
        )


class ReadOnlyDatabase(DatabaseError, code="25006"):
    """A write reached a database that takes none: a hot standby (it only replays the
    primary's changes), or a connection made read-only, such as the pool of
    `SIGNOFF_READ_DATABASE_URL`. Nothing was written: writes go to the primary."""

    def __init__(self, message: str, *, target: str | None = None) -> None:
        super().__init__(message)
        self.target = target

    @classmethod
    def from_driver(cls, error: BaseException, sqlstate: str, target: str) -> DatabaseError:
        return cls(
            f"{target} takes no writes (a hot standby or a read-only connection): "
            f"{_described(error, sqlstate)}; writes go to the primary (SIGNOFF_DATABASE_URL)",
            target=target,
        )


class PermissionDenied(DatabaseError, code="42501"):
    """The login's roles do not allow this statement (for example a worker writing a table or
    calling a reviewer's function); nothing was written."""


class EventNotPermitted(PermissionDenied, code="SG401"):
    """The login may not append events of this `event_type` (see the `event_rights` table):
    a worker deciding an approval, say; nothing was written."""

    def __init__(self, message: str, *, login: str | None, event_type: str | None) -> None:
        super().__init__(message)
        self.login = login
        self.event_type = event_type

    @classmethod
    def from_driver(cls, error: BaseException, sqlstate: str, target: str) -> DatabaseError:
        fields = _fields(error)
        login, type_ = fields.get("login"), fields.get("type")
        return cls(
            _described(error, sqlstate),
            login=login if isinstance(login, str) else None,
            event_type=type_ if isinstance(type_, str) else None,
        )


class _StreamRefused(DatabaseError):
    """A write the database refused for one stream, named in DETAIL's `stream_id`."""

    def __init__(self, message: str, *, stream_id: str | None) -> None:
        super().__init__(message)
        self.stream_id = stream_id

    @classmethod
    def from_driver(cls, error: BaseException, sqlstate: str, target: str) -> DatabaseError:
        stream = _fields(error).get("stream_id")
        return cls(
            _described(error, sqlstate), stream_id=stream if isinstance(stream, str) else None
        )


class RowOutOfStep(_StreamRefused, code="SG422"):
    """A projection row was not what its events make it (a status, a decider or a consumer
    changed without the event that says so, or a row outside its stream); nothing was written."""


class LeaseHeld(_StreamRefused, code="SG432"):
    """A step of a running call from a process that does not hold the call's lease (it lacks
    the lease token) before the lease lapsed by the database server's clock, or, after it
    lapsed, a step other than a takeover or a settlement: only the lease's holder renews it
    or records the call's outcome. Nothing was written."""


class HistoryMoved(_StreamRefused, code="SG438"):
    """A call judged by its run's history (a policy counting or summing earlier calls) met
    calls of the run that started after it was judged; nothing was written: judge it again."""

    retryable = True


class AppendInSavepoint(_StreamRefused, code="SG425"):
    """Events were appended inside a savepoint (a nested transaction): their rows would carry
    the savepoint's transaction id, which `ledger verify` cannot tell from a forged one, so the
    database refuses; append at the transaction's top level. Nothing was written."""


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


class SchemaFromPreRelease(SignoffError):
    """The database was made by a pre-release Signoff, whose revisions were squashed into the
    0.1 baseline before release: there is no upgrade path, the database must be made anew."""

    def __init__(self, current: str) -> None:
        super().__init__(
            f"database schema revision {current} was made by a pre-release Signoff and cannot "
            "be upgraded: recreate the database, then run `signoff db upgrade`"
        )
        self.current = current


class HistoryLost(DatabaseError, code="SG410"):
    """Committed history was lost: the database no longer holds events that were committed (a
    failover promoted a standby that had not received them, or a restore went back to an
    earlier time). Nothing whose outcome can no longer be proven is run or consumed again:

    - a process that saw the lost events committed finds it on its next connection
      (`ledger.store.fence`), reports it to the database and refuses every further use of it
      (`missing` names the positions it lacks);
    - while the loss is open, the database starts no tool call and takes none over, for any
      process, old or new (SQLSTATE SG410, raised before anything is written).

    An operator accounts for the lost calls and settles the loss (`signoff db history`).
    """

    def __init__(self, message: str, *, target: str | None = None, missing: list[int]) -> None:
        super().__init__(message)
        self.target = target
        self.missing = missing

    @classmethod
    def seen(cls, target: str, missing: list[int], loss_id: int | None) -> HistoryLost:
        """This process saw the events at `missing` committed; the database lacks them, and
        recorded the loss as `loss_id` (None: it did not, see the log)."""
        shown = ", ".join(str(p) for p in missing[:5]) + (" ..." if len(missing) > 5 else "")
        recorded = (
            f"recorded as loss {loss_id}"
            if loss_id is not None
            else "not recorded by the database (a loss of these events was settled already, "
            "or the report failed: see the log; `signoff db history record` records one)"
        )
        return cls(
            f"the database at {target} no longer holds events this process saw committed "
            f"(positions {shown}): committed transactions were lost (a failover to a standby "
            f"behind the primary?); refusing to go on: {recorded}; restart the process once "
            "an operator has settled it (`signoff db history`)",
            target=target,
            missing=missing,
        )

    @classmethod
    def from_driver(cls, error: BaseException, sqlstate: str, target: str) -> DatabaseError:
        return cls(
            f"{_described(error, sqlstate)}: an operator accounts for the lost calls and "
            "settles the loss (`signoff db history`)",
            target=target,
            missing=[],
        )


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


class VersionConflict(DatabaseError, code="SG409"):
    """Another writer appended to the stream first; nothing was written."""

    def __init__(self, stream_id: str, expected_version: int, actual_version: int | None) -> None:
        actual = "unknown" if actual_version is None else str(actual_version)
        super().__init__(
            f"stream {stream_id!r}: expected version {expected_version}, found {actual}"
        )
        self.stream_id = stream_id
        self.expected_version = expected_version
        self.actual_version = actual_version

    @classmethod
    def from_driver(cls, error: BaseException, sqlstate: str, target: str) -> DatabaseError:
        fields = _fields(error)
        stream, expected = fields.get("stream_id"), _int_or_none(fields.get("expected_version"))
        return cls(
            stream if isinstance(stream, str) else "unknown",
            -1 if expected is None else expected,
            _int_or_none(fields.get("actual_version")),
        )


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


class ReviewerKekMissing(KeyRingError):
    """This process holds no reviewer-side KEK, so it cannot sign decisions (agent workers never
    hold one: they verify with the public key)."""

    def __init__(self, needed: str) -> None:
        super().__init__(
            f"signing a decision needs the reviewer-side KEK ({needed}): set "
            "SIGNOFF_REVIEWER_KEK_FILE (or SIGNOFF_REVIEWER_KEK) on the reviewer side; agent "
            "workers never hold it"
        )
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
    """No active key exists for a purpose (run `signoff keys init`); `may_create` False: and
    this login may not make one (a worker's), so the owner or a key administrator must."""

    def __init__(self, purpose: str, *, may_create: bool = True) -> None:
        who = "" if may_create else " as the owner or a key administrator (this login may not)"
        super().__init__(f"no active {purpose} key: run `signoff keys init`{who}")
        self.purpose = purpose
        self.may_create = may_create


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


class PublicKeyMismatch(KeyRingError):
    """A signing key's public key is not the one its private key gives, or not the one the
    journal recorded when the key was made: the ring neither signs with it nor publishes it."""

    def __init__(self, key_id: str, against: str) -> None:
        super().__init__(
            f"signing key {key_id}: the public key in data_keys does not match {against}; "
            "the key is refused (rotate it out with `signoff keys rotate`)"
        )
        self.key_id = key_id
        self.against = against


class PublicKeyUnrecorded(KeyRingError):
    """A signing key has no public key in the journal. Signoff records it in the same
    transaction that makes the key, so this key is not one Signoff made: it is refused."""

    def __init__(self, key_id: str) -> None:
        super().__init__(
            f"signing key {key_id} has no public key in the journal, which records one for "
            "every key Signoff makes; the key is refused (rotate it out with `signoff keys "
            "rotate`)"
        )
        self.key_id = key_id


class NonceBudgetExhausted(KeyRingError):
    """A sealing key has sealed as many messages as its nonce budget allows."""

    def __init__(self, key_id: str, purpose: str, budget: int) -> None:
        super().__init__(
            f"key {key_id} has sealed its budget of {budget} messages (random 96-bit nonces): "
            f"run `signoff keys rotate {purpose}`"
        )
        self.key_id = key_id
        self.purpose = purpose
        self.budget = budget


class NoNonceReservation(KeyRingError):
    """This process has sealed far more under a key than it reserved since its last
    `ring.sealing()`, which reserves more."""

    def __init__(self, key_id: str) -> None:
        super().__init__(
            f"this process sealed too many messages under key {key_id} beyond its reservation: "
            "seal in `async with ring.sealing():` blocks, which reserve more"
        )
        self.key_id = key_id


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


class LeaseLost(CallStateError):
    """This process's lease on a call lapsed and another worker took the call over or settled
    it: this process's outcome is not recorded (the call is `status` now)."""

    def __init__(self, run_id: str, call_id: str, status: str) -> None:
        super().__init__(
            f"call {call_id!r} of run {run_id!r}: this worker's lease lapsed and the call was "
            f"taken over or settled (it is {status} now); this worker's outcome is not recorded"
        )
        self.run_id = run_id
        self.call_id = call_id
        self.status = status


class CallTampered(SignoffError):
    """A call's `tool_calls` row disagrees with its stream in what decides whether it runs
    (status, effect, attempts, version, digests, approval): the ledger refuses to run, replay,
    retry, settle or resolve it until the row is rebuilt from the journal."""

    def __init__(self, run_id: str, call_id: str, fields: tuple[str, ...]) -> None:
        super().__init__(
            f"call {call_id!r} of run {run_id!r}: its row disagrees with its stream in "
            f"{', '.join(fields)}; nothing was run (`signoff ledger verify` shows the rows)"
        )
        self.run_id = run_id
        self.call_id = call_id
        self.fields = fields


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
