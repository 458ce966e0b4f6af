"""Dex agent sessions: a whole LangGraph agent (create_agent with `SignoffMiddleware`, or a
StateGraph with `signoff_tool_node`) as one durable Dex Flow per session, one `RunModel` Step
per model call and one Step per tool call, its approvals in Signoff's store, its tool calls in
the ledger and its run state in the encrypted checkpointer.

Workers: `AgentSessionFlow(AgentSession(graph, saver, signoff))` in a
`Registry([...], allow_async_handlers=True)` served by an `AsyncWorker`. Clients: the same Flow
without a session, and `SessionClient`.
"""

# ruff: noqa: E402  (the extras are checked before anything imports dex or LangGraph)

from adapters.extras import DEX, LANGGRAPH, require_extra

require_extra("adapters.dex.sessions", "dex", DEX)
require_extra("adapters.dex.sessions", "langgraph", LANGGRAPH)

from ..errors import SessionGraphRefused, TurnRefused
from .agent import AgentSession, ModelStop, PendingCall, user_message_id
from .client import SessionClient
from .flow import (
    EVENTS,
    SEND_MESSAGE_RPC,
    TURN_CALLS,
    USER_MESSAGES,
    AgentSessionFlow,
    AwaitUserMessage,
    FailTurn,
    ResumeTurn,
    RunModel,
    StartAgentSession,
)
from .notes import NOT_RUN, failed_turn_messages
from .values import (
    SessionEvent,
    SessionEventType,
    SessionResult,
    SessionStart,
    ToolCallDone,
    TurnStep,
    UserMessage,
)

__all__ = [
    "EVENTS",
    "NOT_RUN",
    "SEND_MESSAGE_RPC",
    "TURN_CALLS",
    "USER_MESSAGES",
    "AgentSession",
    "AgentSessionFlow",
    "AwaitUserMessage",
    "FailTurn",
    "ModelStop",
    "PendingCall",
    "ResumeTurn",
    "RunModel",
    "SessionClient",
    "SessionEvent",
    "SessionEventType",
    "SessionGraphRefused",
    "SessionResult",
    "SessionStart",
    "StartAgentSession",
    "ToolCallDone",
    "TurnRefused",
    "TurnStep",
    "UserMessage",
    "failed_turn_messages",
    "user_message_id",
]
