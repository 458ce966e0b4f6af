"""Errors of the Dex adapter. Each carries the ids it is about. `DecisionConflict` is the
runtime's, shared with every adapter."""

from __future__ import annotations

from adapters.runtime import DecisionConflict
from approvals.errors import ApprovalError
from ledger.errors import SignoffError

__all__ = ["ApprovalNotForThisCall", "DecisionConflict", "RuntimeNotBound"]


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
