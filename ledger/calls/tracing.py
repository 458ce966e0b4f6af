"""A call through the ledger as the GenAI `execute_tool {tool}` span (`ledger.telemetry`), and
its count in the `signoff.tool.calls` metric.

The span opens once the call is known to be well formed and stays current while the tool runs,
so the tool's own spans are its children. When it records, it ends naming the event that gave
the call its status, the evidence `ledger verify` and a proof stand on: its journal position and
hash. A call this process wrote learns them from the write itself (`signoff_commit_call` returns
them: `written`, which reaches the span through a holder in the context, so that it crosses the
shielded task that records an outcome); a replayed call reads them from the journal (one indexed
row, only while a span records).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from opentelemetry.trace import Span

from ..log import get_logger
from ..store import Database
from ..telemetry import Attr, approval_wait, failed, span, tool_calls
from .history import Judgment
from .model import CallOutcome, CallStatus, ToolCall, ToolPolicy, call_stream

__all__ = ["approval_waited", "tool_span", "traced_outcome", "writing", "written"]

log = get_logger(__name__)

_OUTCOME_EVENT = """
SELECT position, encode(hash, 'hex') FROM events
WHERE stream_id = $1 ORDER BY version DESC LIMIT 1
"""
_FAILED = frozenset({CallStatus.FAILED, CallStatus.OUTCOME_UNKNOWN})


@dataclass
class _Evidence:
    """What this call's execution learnt for its span and metrics: the last event it appended
    (position, hash hex), and how long the approval it consumed waited (seconds, tier)."""

    event: tuple[int, str] | None = None
    approval_wait: tuple[float, str] | None = None


_evidence: ContextVar[_Evidence | None] = ContextVar("signoff_call_evidence", default=None)


def writing() -> None:
    """A write of this call is being sent: the event noted before is no longer its last (and
    if the write's answer is lost, the span reads its event from the journal)."""
    evidence = _evidence.get()
    if evidence is not None:
        evidence.event = None


def written(result: Any) -> None:
    """What `signoff_commit_call` returned for a write of this call (`{"position", "hash"}`),
    kept for its span. It runs after the write committed: whatever it is given, it never
    raises (an answer it cannot read leaves the span to read the journal)."""
    evidence = _evidence.get()
    if evidence is None:
        return
    try:
        value = json.loads(result) if isinstance(result, str) else result
        evidence.event = (int(value["position"]), str(value["hash"]))
    except (TypeError, ValueError, KeyError, IndexError):
        evidence.event = None


def committed_event() -> tuple[int, str] | None:
    """The position and hash of the call's last write, once `execute` has it committed."""
    evidence = _evidence.get()
    return None if evidence is None else evidence.event


def approval_waited(seconds: float, tier: str) -> None:
    """The call consumed an approval that waited `seconds` for its decision: observed with the
    call's outcome, once its intent committed (a rolled-back consumption is consumed again)."""
    evidence = _evidence.get()
    if evidence is not None:
        evidence.approval_wait = (seconds, tier)


@contextmanager
def tool_span(call: ToolCall, policy: ToolPolicy, judgment: Judgment | None) -> Iterator[Span]:
    """The call's span, with what is known before it runs."""
    attributes: dict[str, str | int] = {
        Attr.OPERATION: "execute_tool",
        Attr.TOOL_NAME: call.tool,
        Attr.TOOL_CALL_ID: call.call_id,
        Attr.TOOL_TYPE: "function",
        Attr.RUN_ID: call.run_id,
        Attr.CALL_EFFECT: str(policy.effect),
    }
    if judgment is not None:
        record = judgment.record
        for name, key in (
            (Attr.POLICY_OUTCOME, "outcome"),
            (Attr.POLICY_VERSION, "version"),
            (Attr.POLICY_MODE, "mode"),
        ):
            value = record.get(key)
            if isinstance(value, str | int):
                attributes[name] = value
    with span(f"execute_tool {call.tool}", attributes) as current:
        token = _evidence.set(_Evidence())
        try:
            yield current
        finally:
            _evidence.reset(token)


async def traced_outcome(db: Database, current: Span, call: ToolCall, outcome: CallOutcome) -> None:
    """Count the call (and its approval's wait), and end its span with its outcome and the
    event that recorded it."""
    evidence = _evidence.get()
    if evidence is not None and evidence.approval_wait is not None and not outcome.replayed:
        seconds, tier = evidence.approval_wait
        approval_wait.record(seconds, {Attr.APPROVAL_TIER: tier, Attr.TOOL_NAME: call.tool})
    tool_calls.add(
        1,
        {
            Attr.TOOL_NAME: call.tool,
            Attr.CALL_STATUS: str(outcome.status),
            Attr.CALL_REPLAYED: outcome.replayed,
        },
    )
    if not current.is_recording():
        return
    current.set_attributes(
        {
            Attr.CALL_STATUS: str(outcome.status),
            Attr.CALL_ATTEMPT: outcome.attempts,
            Attr.CALL_REPLAYED: outcome.replayed,
        }
    )
    if outcome.approval_id is not None:
        current.set_attribute(Attr.APPROVAL_ID, outcome.approval_id)
    if outcome.call_id != call.call_id:
        current.set_attribute(Attr.CALL_RAN_AS, outcome.call_id)
    if outcome.status in _FAILED:
        failed(current, str(outcome.status))
    event = None if evidence is None or outcome.replayed else evidence.event
    if event is None:
        event = await _last_event(db, call_stream(call.run_id, outcome.call_id))
    if event is not None:
        current.set_attributes({Attr.JOURNAL_POSITION: event[0], Attr.EVENT_HASH: event[1]})


async def _last_event(db: Database, stream_id: str) -> tuple[int, str] | None:
    # The outcome stands recorded: whatever fails here only leaves the span without its event.
    try:
        async with db.connection() as conn:
            row = await conn.fetchrow(_OUTCOME_EVENT, stream_id)
    except Exception as e:
        log.debug("call span without its event", stream_id=stream_id, error_type=type(e).__name__)
        return None
    return None if row is None else (row[0], row[1])
