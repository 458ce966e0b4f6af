"""Errors of the Dex adapter. Each carries the ids it is about."""

from __future__ import annotations

from approvals.errors import ApprovalError
from ledger.errors import SignoffError

__all__ = ["ApprovalNotForThisCall", "DecisionConflict", "RuntimeNotBound"]


class DecisionConflict(ApprovalError):
    """A decision arrived for an approval that already holds a different one (or that expired
    or was cancelled). The recorded decision stands; nothing was written.

    Attributes:
        recorded: the approval's status (`approved`, `rejected`, `expired`, ...).
        attempted: the kind of the decision that was refused.
    """

    def __init__(self, approval_id: str, recorded: str, attempted: str) -> None:
        super().__init__(
            approval_id,
            f"already {recorded}; a different decision ({attempted}) cannot replace it",
        )
        self.recorded = recorded
        self.attempted = attempted


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
