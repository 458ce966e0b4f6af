"""Approval records, decisions, signed resume tokens and policies, built on the ledger's journal."""

from .errors import (
    ApprovalAlreadyDecided,
    ApprovalError,
    ApprovalExpired,
    ApprovalPending,
    DecisionNotAllowed,
    InvalidApprovalRequest,
    InvalidReviewerId,
    TokenBindingMismatch,
    TokenError,
    TokenForged,
    TokenMalformed,
    UnknownApproval,
    UnknownReviewer,
)
from .gate import approval_gate, gate_result
from .identity import reviewer_id
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
from .reviewers import ReviewerDirectory, ReviewerEntry
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
    "InvalidReviewerId",
    "Review",
    "Reviewer",
    "ReviewerDirectory",
    "ReviewerEntry",
    "TokenBindingMismatch",
    "TokenError",
    "TokenForged",
    "TokenMalformed",
    "UnknownApproval",
    "UnknownReviewer",
    "approval_gate",
    "args_digest",
    "binding_of",
    "check_decision",
    "gate_result",
    "reviewer_id",
]
