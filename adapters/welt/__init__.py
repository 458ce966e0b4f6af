"""Welt adapter: Signoff approvals asked and answered in Slack through Welt's wire contract.

Outbound, each pending approval becomes one `interrupt` event (id: the approval id) with the
buttons and text field its policy allows; inbound, answers become store decisions by the Slack
user who gave them, and the paused thread resumes from the config stored with the approval, in
any process. The reply streams the model's text, a "using tool" indicator per tool call, and
the files of the tools the agent names (`files_from`). Welt's conversation turns, files
included, are decoded for the graph as standard content blocks, tool blocks refused.
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
from .stream import FILE_BLOCKS, file_name, renderable_events
from .wire import (
    DataEvent,
    FileEvent,
    InputSpec,
    InterruptEvent,
    OptionSpec,
    Reason,
    ToolResultEvent,
    ToolUseEvent,
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
    "FILE_BLOCKS",
    "REJECT_VALUE",
    "STREAM_MODES",
    "AnswerOutcome",
    "AnswerStatus",
    "DataEvent",
    "FileEvent",
    "ForgedToolTurn",
    "InputSpec",
    "InterruptEvent",
    "InvalidWeltPayload",
    "MissingReviewer",
    "OptionSpec",
    "Reason",
    "ToolResultEvent",
    "ToolUseEvent",
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
    "file_name",
    "interrupt_event",
    "interrupt_events",
    "notices",
    "parse_interrupt_responses",
    "pending_events",
    "record_answers",
    "renderable_events",
    "signoff_requests",
    "slack_reviewer",
    "welt_events",
]
