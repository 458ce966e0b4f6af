"""Spans and metrics through the OpenTelemetry API, which does nothing until the application
installs an SDK: the library configures none, and with none installed a span costs a few
attribute-free calls (every attribute is set only on a span that records).

Semantic conventions: OpenTelemetry semantic conventions 1.44.0 (`SCHEMA_URL`), with the GenAI
attributes of that release's registry, all in "Development" status (and since moved to the
semantic-conventions-genai repository). A call through the ledger is the GenAI `execute_tool
{gen_ai.tool.name}` span, kind INTERNAL. Arguments and results are never set, not even opt-in
(`gen_ai.tool.call.arguments` and `.result`): they are sealed in the ledger, and a trace is not.
What Signoff adds is in the `signoff.` namespace (`Attr`); a call's span names the journal
position and hash of the event that gave the call its status, the evidence an auditor proves.

Metrics (instrument names in `Metric`): calls by tool and status, how long approvals waited for
their decision (observed when a call consumes one, by tier and tool), and group-commit sizes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Final

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from . import __version__

__all__ = ["SCHEMA_URL", "Attr", "Metric", "failed", "span", "tracer"]

SCHEMA_URL: Final = "https://opentelemetry.io/schemas/1.44.0"
"""The semantic-conventions release the attributes follow."""

_SCOPE: Final = "signoff"

tracer = trace.get_tracer(_SCOPE, __version__, schema_url=SCHEMA_URL)
_meter = metrics.get_meter(_SCOPE, __version__, schema_url=SCHEMA_URL)


class Attr:
    """Attribute names: the conventions' own, then Signoff's."""

    OPERATION: Final = "gen_ai.operation.name"
    TOOL_NAME: Final = "gen_ai.tool.name"
    TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
    TOOL_TYPE: Final = "gen_ai.tool.type"
    ERROR_TYPE: Final = "error.type"

    RUN_ID: Final = "signoff.run.id"
    CALL_STATUS: Final = "signoff.call.status"
    CALL_EFFECT: Final = "signoff.call.effect"
    CALL_ATTEMPT: Final = "signoff.call.attempt"
    CALL_REPLAYED: Final = "signoff.call.replayed"
    CALL_RAN_AS: Final = "signoff.call.ran_as"  # the run's call a once-per-run tool replays
    APPROVAL_ID: Final = "signoff.approval.id"
    APPROVAL_STATUS: Final = "signoff.approval.status"
    APPROVAL_TIER: Final = "signoff.approval.tier"
    POLICY_OUTCOME: Final = "signoff.policy.outcome"
    POLICY_VERSION: Final = "signoff.policy.version"
    POLICY_MODE: Final = "signoff.policy.mode"
    JOURNAL_POSITION: Final = "signoff.journal.position"
    EVENT_HASH: Final = "signoff.event.hash"
    THREAD_ID: Final = "signoff.checkpoint.thread_id"
    CHECKPOINT_FOUND: Final = "signoff.checkpoint.found"


class Metric:
    """Instrument names (Prometheus writes them with `_` and a unit suffix)."""

    TOOL_CALLS: Final = "signoff.tool.calls"
    APPROVAL_WAIT: Final = "signoff.approval.wait.duration"
    GROUP_STEPS: Final = "signoff.group_commit.steps"


tool_calls = _meter.create_counter(
    Metric.TOOL_CALLS,
    unit="{call}",
    description="Tool calls through the ledger, by tool, status and whether they were replayed",
)
approval_wait = _meter.create_histogram(
    Metric.APPROVAL_WAIT,
    unit="s",
    description="From an approval's request to its decision, observed when a call consumes it",
)
group_steps = _meter.create_histogram(
    Metric.GROUP_STEPS,
    unit="{step}",
    description="Steps sent in one group-commit statement",
    explicit_bucket_boundaries_advisory=[1, 2, 3, 4, 8],
)


@contextmanager
def span(
    name: str,
    attributes: Mapping[str, AttributeValue] | None = None,
    *,
    kind: SpanKind = SpanKind.INTERNAL,
    context: Context | None = None,
) -> Iterator[Span]:
    """A span made current while the block runs (a child of `context`'s span when given, else
    of the current one); an exception ends it as an error whose `error.type` is the exception's
    class (its message is never recorded: it may quote a value)."""
    with tracer.start_as_current_span(
        name, context, kind, attributes, record_exception=False, set_status_on_exception=False
    ) as current:
        try:
            yield current
        except BaseException as e:
            failed(current, type(e).__name__)
            raise


def failed(current: Span, error_type: str) -> None:
    """Mark `current` as failed with `error.type` (a class or status name, never a message)."""
    if current.is_recording():
        current.set_attribute(Attr.ERROR_TYPE, error_type)
        current.set_status(Status(StatusCode.ERROR))
