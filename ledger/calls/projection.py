"""The `tool_calls` table as a projection of the `call:<run>/<call id>` streams: pure, no I/O.

`CallProjection` is the fold rule and the row mapping; `ledger.journal.projection` folds with
it, writes the row in the same statement as the events, and rebuilds the table to check it.
Ciphertexts and leases are not in the record: `commit` is given them by name
(`args_sealed`, `result_sealed`, `lease_seconds`, `lease_token`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from ..errors import ProjectionError, UnknownEventType
from ..journal.projection import Fact, Projection
from . import _sql as sql
from .model import CallRecord, CallStatus, Effect, call_record

__all__ = ["CALLS", "CallProjection"]


class CallProjection(Projection[CallRecord]):
    """The `tool_calls` table. A new call that meets a row (the same call, or, once per run,
    the same tool) writes nothing, and the caller takes the slow path. Later steps are fenced
    by the version the caller read: a worker whose call was taken over writes nothing; waiters
    are woken only when there are some."""

    table = "tool_calls"
    key = ("run_id", "call_id")
    stream_prefix = "call:"
    columns = sql.COLUMNS
    write_function = "signoff_commit_call"
    # The columns of `to_row` but the version, which the function sets.
    row_parameters = (
        "run_id",
        "call_id",
        "tool",
        "effect",
        "once_per_run",
        "request_digest",
        "args_digest",
        "idempotency_key",
        "approval_id",
        "status",
        "attempts",
        "worker_id",
        "result_digest",
        "resolved_by",
        "started_at",
        "finished_at",
        "approved_by",
        "approval_stream",
    )
    extras = ("args_sealed", "result_sealed", "lease_seconds", "lease_token", "tally")

    def stream_of(self, record: CallRecord) -> str:
        return record.stream_id

    def rows_of(self, stream_ids: Sequence[str]) -> tuple[str, tuple[Any, ...]]:
        """By primary key: the (run, call id) a stream id names (`call:<run>/<call id>`, both
        parts percent-encoded, so the one `/` splits them), and the row must name that stream."""
        runs, calls = [], []
        for stream_id in stream_ids:
            run, sep, call = stream_id.removeprefix(self.stream_prefix).partition("/")
            if sep:
                runs.append(_unescaped(run))
                calls.append(_unescaped(call))
        condition = (
            "(run_id, call_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))"
            " AND stream_id = ANY($3::text[])"
        )
        return condition, (runs, calls, list(stream_ids))

    def from_row(self, row: Mapping[str, Any]) -> CallRecord:
        return call_record(row)

    def to_row(self, record: CallRecord) -> dict[str, Any]:
        r = record
        return {
            "run_id": r.run_id,
            "call_id": r.call_id,
            "tool": r.tool,
            "effect": r.effect,
            "once_per_run": r.once_per_run,
            "request_digest": r.request_digest,
            "args_digest": r.args_digest,
            "idempotency_key": r.idempotency_key,
            "approval_id": r.approval_id,
            "status": r.status,
            "attempts": r.attempts,
            "worker_id": r.worker_id,
            "result_digest": r.result_digest,
            "resolved_by": r.resolved_by,
            "started_at": r.started_at,
            "finished_at": r.finished_at,
            "version": r.version,
            "approved_by": list(r.approved_by),
            "approval_stream": r.approval_stream,
        }

    def notify(self, before: CallRecord | None, after: CallRecord) -> str | None:
        return None if before is None else sql.CHANNEL

    def apply(self, record: CallRecord | None, event: Fact) -> CallRecord:
        return _apply(record, event)


_OUTCOME = {
    "call.succeeded": CallStatus.SUCCEEDED,
    "call.failed": CallStatus.FAILED,
    "call.outcome_unknown": CallStatus.OUTCOME_UNKNOWN,
    "call.denied": CallStatus.DENIED,
    "call.responded": CallStatus.RESPONDED,
}


def _apply(state: CallRecord | None, event: Fact) -> CallRecord:
    """The call after one more event of its stream."""
    version, type_, data = event.version, event.type, event.data
    at = datetime.fromisoformat(data["at"])
    if type_ == "call.started":
        if state is not None:  # a stream starts once: a second start is no fresh call
            raise ProjectionError(event.stream_id, "call.started after the call started")
        return CallRecord(
            run_id=data["run_id"],
            call_id=data["call_id"],
            tool=data["tool"],
            effect=Effect(data["effect"]),
            once_per_run=data["once_per_run"],
            request_digest=data["request_digest"],
            args_digest=data["args_digest"],
            idempotency_key=data["idempotency_key"],
            approval_id=data["approval_id"],
            status=CallStatus.RUNNING,
            attempts=1,
            worker_id=data["worker_id"],
            started_at=at,
            version=version,
            approved_by=tuple(data["approved_by"]),
            approval_stream=data["approval_stream"],
            stream_id=event.stream_id,
        )
    if state is None:
        raise ProjectionError(event.stream_id, f"{type_} before call.started")
    # One `replace` an event: it copies every field, and a call's outcome is on the hot path.
    if type_ == "call.retried":
        return replace(
            state, attempts=data["attempt"], worker_id=data["worker_id"], version=version
        )
    if type_ in _OUTCOME:
        return replace(
            state,
            status=_OUTCOME[type_],
            finished_at=at,
            result_digest=data.get("result_digest"),
            version=version,
        )
    if type_ == "call.resolved":
        return replace(
            state,
            status=CallStatus(data["status"]),
            resolved_by=data["by"],
            finished_at=at,
            result_digest=data["result_digest"],
            version=version,
        )
    raise UnknownEventType(event.stream_id, type_)


CALLS = CallProjection()


def _unescaped(part: str) -> str:
    return part.replace("%2F", "/").replace("%25", "%")
