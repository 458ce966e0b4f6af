"""Approval records, decisions, signed resume tokens and policies, built on the ledger's journal."""

from .errors import (
    ApprovalAlreadyDecided,
    ApprovalError,
    ApprovalExpired,
    ApprovalPending,
    DecisionNotAllowed,
    InvalidApprovalRequest,
    TokenBindingMismatch,
    TokenError,
    TokenForged,
    TokenMalformed,
    UnknownApproval,
)
from .gate import approval_gate, gate_result
from .model import (
    Approval,
    ApprovalPolicy,
    ApprovalStatus,
    Decision,
    DecisionKind,
    Review,
    Reviewer,
    args_digest,
    binding_of,
    check_decision,
)
from .store import NOTIFY_CHANNEL, ApprovalStore

__all__ = [
    "NOTIFY_CHANNEL",
    "Approval",
    "ApprovalAlreadyDecided",
    "ApprovalError",
    "ApprovalExpired",
    "ApprovalPending",
    "ApprovalPolicy",
    "ApprovalStatus",
    "ApprovalStore",
    "Decision",
    "DecisionKind",
    "DecisionNotAllowed",
    "InvalidApprovalRequest",
    "Review",
    "Reviewer",
    "TokenBindingMismatch",
    "TokenError",
    "TokenForged",
    "TokenMalformed",
    "UnknownApproval",
    "approval_gate",
    "args_digest",
    "binding_of",
    "check_decision",
    "gate_result",
]
