"""Errors of the Dex adapter. Each carries the ids it is about. `DecisionConflict` is the
runtime's, shared with every adapter."""

from __future__ import annotations

from adapters.runtime import DecisionConflict
from approvals.errors import ApprovalError
from ledger.errors import SignoffError

__all__ = [
    "ApprovalNotForThisCall",
    "DecisionConflict",
    "RuntimeNotBound",
    "SessionGraphRefused",
    "TurnRefused",
]


class ApprovalNotForThisCall(ApprovalError):
    """A decision was sent to a Flow or tool call the approval does not belong to."""

    def __init__(self, approval_id: str, flow_id: str, call_id: str) -> None:
        super().__init__(
            approval_id, f"belongs to another Flow or call, not {flow_id!r} / {call_id!r}"
        )
        self.flow_id = flow_id
        self.call_id = call_id


class RuntimeNotBound(SignoffError):
    """A Step or RPC ran on a Flow built without a `SignoffDex` runtime (a Client-only Flow)."""


class SessionGraphRefused(SignoffError, ValueError):
    """A graph an agent session cannot run (static interrupts, no tool node of the given
    names, two tools of one name); raised when the session is built."""


class TurnRefused(SignoffError):
    """A model turn an agent session cannot go on with: the graph paused on an interrupt of
    its own or stopped somewhere else than before its tool node, or the model's tool call ids
    are empty, repeated or used before in the session. Nothing ran; the turn fails
    (`FailTurn`) with this message."""

    def __init__(self, session_id: str, reason: str) -> None:
        super().__init__(f"session {session_id}: {reason}")
        self.session_id = session_id
        self.reason = reason
