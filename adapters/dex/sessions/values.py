"""The values an agent session passes through Dex: the start input, each turn Step's input,
the wake-ups of the turn and of the next user message, the events clients read, and the
Flow's output. None of them carries the run state: model messages, tool arguments and
results stay in the encrypted checkpoint and the tool-call ledger; a value names them by the
session's thread (its Flow ID) and a checkpoint id.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = [
    "SessionEvent",
    "SessionEventType",
    "SessionResult",
    "SessionStart",
    "ToolCallDone",
    "TurnStep",
    "UserMessage",
]


@dataclass(frozen=True)
class SessionStart:
    """The start input: the user's first message.

    Attributes:
        text: what the user says. It passes through Dex as the Flow's start input.
        requested_by: who asks (the user); a reviewer who is that person cannot approve
            the session's calls unless the approval policy allows self-approval.
    """

    text: str
    requested_by: str = "agent"


@dataclass(frozen=True)
class UserMessage:
    """A later message of the user (the `signoff_send_message` RPC), or the end of the
    session (`close`). `message_id` makes a repeated delivery harmless."""

    message_id: str
    text: str = ""
    close: bool = False


@dataclass(frozen=True)
class TurnStep:
    """The input of `RunModel`, `ResumeTurn`, `FailTurn` and `AwaitUserMessage`.

    Attributes:
        turn: the user turn, from 1.
        requested_by: as `SessionStart`.
        text: the turn's user message, on the turn's first `RunModel` only.
        checkpoint_id: where the session's run state is: the checkpoint `RunModel` starts
            from and the one the pending tool calls are read from (None: the thread's
            latest; the first turn starts a new thread).
        calls: the calls `ResumeTurn` waits for: tool call id -> tool name.
        error: why the turn failed (`FailTurn` to `AwaitUserMessage`).
    """

    turn: int
    requested_by: str = "agent"
    text: str | None = None
    checkpoint_id: str | None = None
    calls: dict[str, str] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True)
class ToolCallDone:
    """A tool call Step's wake-up for `ResumeTurn`: only the call's id (its outcome is in the
    ledger)."""

    call_id: str


class SessionEventType(StrEnum):
    TEXT_DELTA = "text_delta"
    REASONING_DELTA = "reasoning_delta"
    INTERRUPT_RAISED = "interrupt_raised"
    TURN_COMPLETED = "turn_completed"


@dataclass(frozen=True)
class SessionEvent:
    """One event on the session's stream.

    Attributes:
        type: what happened.
        turn: the user turn it belongs to.
        step_execution_id, attempt: which Step execution wrote it: a retried `RunModel`
            streams its model call again, so group text by (turn, step_execution_id, attempt).
        payload: `{"text"}` for deltas; `{"approval_id", "call_id", "tool", "status"}` for an
            interrupt (never the arguments); `{"status", "error", "checkpoint_id"}` when a turn
            completes (the checkpoint that holds the conversation, for `snapshot`).
    """

    type: SessionEventType
    turn: int
    step_execution_id: str
    attempt: int
    payload: dict[str, Any]


@dataclass(frozen=True)
class SessionResult:
    """The Flow's output when the session ends: its last turn and how that turn ended
    (`completed` or `failed`, with the error). The conversation is read with the client's
    `snapshot`, from the encrypted checkpoint `checkpoint_id`."""

    turn: int
    status: str
    error: str | None = None
    checkpoint_id: str | None = None
