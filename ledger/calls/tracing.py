"""A call through the ledger as the GenAI `execute_tool {tool}` span (`ledger.telemetry`), and
its count in the `signoff.tool.calls` metric.

The span opens once the call is known to be well formed and stays current while the tool runs,
so the tool's own spans are its children. When it records, it ends naming the event that gave
the call its status: that event's journal position and hash, read from the journal (one
indexed row), the evidence `ledger verify` and a proof stand on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry.trace import Span

from ..errors import DatabaseUnavailable
from ..store import Database
from ..telemetry import Attr, failed, span, tool_calls
from .history import Judgment
from .model import CallOutcome, CallStatus, ToolCall, ToolPolicy, call_stream

__all__ = ["tool_span", "traced_outcome"]

_OUTCOME_EVENT = """
SELECT position, encode(hash, 'hex') FROM events
WHERE stream_id = $1 ORDER BY version DESC LIMIT 1
"""
_FAILED = frozenset({CallStatus.FAILED, CallStatus.OUTCOME_UNKNOWN})


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
        yield current


async def traced_outcome(db: Database, current: Span, call: ToolCall, outcome: CallOutcome) -> None:
    """Count the call, and end its span with its outcome and the event that recorded it."""
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
    row = None
    # The outcome stands recorded: a lost connection only leaves the span without its event.
    with contextlib.suppress(DatabaseUnavailable):
        async with db.connection() as conn:
            row = await conn.fetchrow(_OUTCOME_EVENT, call_stream(call.run_id, outcome.call_id))
    if row is not None:
        current.set_attributes({Attr.JOURNAL_POSITION: row[0], Attr.EVENT_HASH: row[1]})
