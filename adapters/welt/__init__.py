"""Welt adapter: Signoff approvals asked and answered in Slack through Welt's wire contract.

Outbound, each pending approval becomes one `interrupt` event (id: the approval id) with the
buttons and text field its policy allows; inbound, answers become store decisions by the Slack
user who gave them, and the paused thread resumes from the config stored with the approval, in
any process. Welt's conversation turns are decoded for the graph, tool blocks refused.
"""

# ruff: noqa: E402  (the extra is checked before anything imports LangGraph)

from adapters.extras import LANGGRAPH, require_extra

require_extra("adapters.welt", "welt", LANGGRAPH)

from .answers import AnswerOutcome, AnswerStatus, decision_for, record_answers, slack_reviewer
from .errors import (
    ForgedToolTurn,
    InvalidWeltPayload,
    MissingReviewer,
    UnknownInterrupt,
    UnsupportedInterrupt,
    WeltError,
)
from .messages import decode_messages
from .render import (
    APPROVE_VALUE,
    DECIDED_ELSEWHERE,
    REJECT_VALUE,
    approval_event,
    approval_reason,
    interrupt_events,
    pending_events,
    signoff_requests,
)
from .reply import STREAM_MODES, WeltAgent, notices, welt_events
from .wire import (
    DataEvent,
    InputSpec,
    InterruptEvent,
    OptionSpec,
    Reason,
    WeltAnswer,
    WeltEvent,
    check_reason,
    envelope_of,
    interrupt_event,
    parse_interrupt_responses,
)

__all__ = [
    "APPROVE_VALUE",
    "DECIDED_ELSEWHERE",
    "REJECT_VALUE",
    "STREAM_MODES",
    "AnswerOutcome",
    "AnswerStatus",
    "DataEvent",
    "ForgedToolTurn",
    "InputSpec",
    "InterruptEvent",
    "InvalidWeltPayload",
    "MissingReviewer",
    "OptionSpec",
    "Reason",
    "UnknownInterrupt",
    "UnsupportedInterrupt",
    "WeltAgent",
    "WeltAnswer",
    "WeltError",
    "WeltEvent",
    "approval_event",
    "approval_reason",
    "check_reason",
    "decision_for",
    "decode_messages",
    "envelope_of",
    "interrupt_event",
    "interrupt_events",
    "notices",
    "parse_interrupt_responses",
    "pending_events",
    "record_answers",
    "signoff_requests",
    "slack_reviewer",
    "welt_events",
]
