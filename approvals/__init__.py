"""Approval records, decisions, signed resume tokens and policies, built on the ledger's journal."""

from .errors import (
    ApprovalAlreadyDecided,
    ApprovalError,
    ApprovalExpired,
    ApprovalPending,
    DecisionForged,
    DecisionNotAllowed,
    InvalidApprovalRequest,
    InvalidReviewerId,
    PolicyViolation,
    TokenBindingMismatch,
    TokenError,
    TokenForged,
    TokenMalformed,
    UnknownApproval,
    UnknownReviewer,
)
from .gate import approval_gate, gate_result
from .identity import reviewer_id
from .integrity import ProblemKind, StreamProblem, approval_problems
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
    "DecisionForged",
    "DecisionKind",
    "DecisionNotAllowed",
    "InvalidApprovalRequest",
    "InvalidReviewerId",
    "PolicyViolation",
    "ProblemKind",
    "Review",
    "Reviewer",
    "ReviewerDirectory",
    "ReviewerEntry",
    "StreamProblem",
    "TokenBindingMismatch",
    "TokenError",
    "TokenForged",
    "TokenMalformed",
    "UnknownApproval",
    "UnknownReviewer",
    "approval_gate",
    "approval_problems",
    "args_digest",
    "binding_of",
    "check_decision",
    "gate_result",
    "reviewer_id",
]
