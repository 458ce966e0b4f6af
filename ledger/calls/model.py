"""Tool calls: effects, policies, records and their rows. No I/O (the fold is `projection`).

A call's stream is `call:<run id>/<call id>`. Its events, in order:

- `call.started` (attempt 1: tool, effect, digests, idempotency key, worker, and the approval
  that allowed it: its id, its stream and the reviewers who approved it, as the gate said);
- `call.retried` (a read or idempotent write runs again: a later attempt, maybe another worker);
- one outcome: `call.succeeded`, `call.failed`, `call.outcome_unknown` (a write that may have
  happened), `call.denied` (the approval said no), `call.responded` (a reviewer answered instead);
- `call.resolved`, a person's verdict on an `outcome_unknown` call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

__all__ = [
    "CallContext",
    "CallOutcome",
    "CallRecord",
    "CallStatus",
    "Effect",
    "GateDeny",
    "GateRespond",
    "GateRun",
    "ToolCall",
    "ToolFailed",
    "ToolPolicy",
    "call_record",
    "call_stream",
]


class Effect(StrEnum):
    """What running a tool does to the world, as the Dex agent runner names it."""

    READ = "read"  # may run again after a crash
    IDEMPOTENT_WRITE = "idempotent_write"  # retried with the same idempotency key
    SINGLE_ATTEMPT = "single_attempt"  # everything else: at most once, else outcome_unknown

    @property
    def max_attempts(self) -> int:
        return 1 if self is Effect.SINGLE_ATTEMPT else 3


class CallStatus(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    OUTCOME_UNKNOWN = "outcome_unknown"
    DENIED = "denied"
    RESPONDED = "responded"

    @property
    def final(self) -> bool:
        return self is not CallStatus.RUNNING


class ToolFailed(Exception):
    """Raise from a tool to say it failed and changed nothing: recorded as `failed`, never
    retried. Any other exception from a write leaves its outcome unknown."""


@dataclass(frozen=True)
class ToolPolicy:
    effect: Effect = Effect.SINGLE_ATTEMPT
    once_per_run: bool = False  # at most once per run, whatever the call id


@dataclass(frozen=True)
class ToolCall:
    """One call a model asked for. `turn_id` names the model turn within the run."""

    run_id: str
    call_id: str
    tool: str
    args: dict[str, Any]
    turn_id: str = "0"

    @property
    def idempotency_key(self) -> str:
        return f"{self.run_id}/{self.turn_id}/{self.call_id}"


@dataclass(frozen=True)
class CallContext:
    """What a tool function is told about the call it runs."""

    run_id: str
    call_id: str
    idempotency_key: str
    attempt: int


@dataclass(frozen=True)
class GateRun:
    """The approval allows the call, with these arguments (a reviewer's edit, or the request)."""

    args: dict[str, Any]
    approval_id: str | None = None
    approval_stream: str | None = None  # where the approval's own events are
    approved_by: tuple[str, ...] = ()  # the reviewers whose decision allows the call


@dataclass(frozen=True)
class GateDeny:
    reason: str
    approval_id: str | None = None
    approval_stream: str | None = None


@dataclass(frozen=True)
class GateRespond:
    """A reviewer answered instead of running the tool; the answer is the call's result."""

    message: str
    approval_id: str | None = None
    approval_stream: str | None = None


@dataclass(frozen=True)
class CallRecord:
    """A tool call as the ledger knows it (the `tool_calls` projection, without ciphertexts)."""

    run_id: str
    call_id: str
    tool: str
    effect: Effect
    once_per_run: bool
    request_digest: str
    args_digest: str
    idempotency_key: str
    approval_id: str | None
    status: CallStatus
    attempts: int
    worker_id: str
    started_at: datetime
    finished_at: datetime | None = None
    result_digest: str | None = None
    resolved_by: str | None = None
    version: int = 0
    approved_by: tuple[str, ...] = ()
    approval_stream: str | None = None
    stream_id: str = ""  # its stream, as its row names it (default: `call_stream`)

    def __post_init__(self) -> None:
        if not self.stream_id:
            object.__setattr__(self, "stream_id", call_stream(self.run_id, self.call_id))


@dataclass(frozen=True)
class CallOutcome:
    """What a call came to. `result` is the tool's value (or a reviewer's answer); `error` the
    failure text; `replayed` when this process did not run it; `call_id` is the call that ran
    (another one for a once-per-run tool)."""

    status: CallStatus
    call_id: str
    result: Any = None
    error: str | None = None
    replayed: bool = False
    attempts: int = 0
    approval_id: str | None = None


def call_record(row: Mapping[str, Any]) -> CallRecord:
    """A `tool_calls` row (any mapping with its columns) as a record."""
    return CallRecord(
        run_id=row["run_id"],
        call_id=row["call_id"],
        tool=row["tool"],
        effect=Effect(row["effect"]),
        once_per_run=row["once_per_run"],
        request_digest=row["request_digest"],
        args_digest=row["args_digest"],
        idempotency_key=row["idempotency_key"],
        approval_id=row["approval_id"],
        status=CallStatus(row["status"]),
        attempts=row["attempts"],
        worker_id=row["worker_id"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        result_digest=row["result_digest"],
        resolved_by=row["resolved_by"],
        version=row["version"],
        approved_by=tuple(row["approved_by"]),
        approval_stream=row["approval_stream"],
        stream_id=row["stream_id"],
    )


def call_stream(run_id: str, call_id: str) -> str:
    """The stream of a new call: `call:<run>/<call id>`, with `%` and `/` in either part
    percent-encoded, so no two calls share one (as `signoff_commit_call` checks
    in the database)."""
    return f"call:{_escaped(run_id)}/{_escaped(call_id)}"


def _escaped(part: str) -> str:
    return part.replace("%", "%25").replace("/", "%2F")
