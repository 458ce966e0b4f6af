"""Errors of the approval store. Each carries the approval id it is about."""

from __future__ import annotations

from ledger.errors import SignoffError

__all__ = [
    "ApprovalAlreadyDecided",
    "ApprovalError",
    "ApprovalExpired",
    "ApprovalPending",
    "CredentialError",
    "CredentialExpired",
    "CredentialRevoked",
    "CredentialScopeRefused",
    "DecisionForged",
    "DecisionNotAllowed",
    "InvalidApprovalRequest",
    "InvalidCredential",
    "InvalidReviewerId",
    "PolicyViolation",
    "TokenBindingMismatch",
    "TokenError",
    "TokenForged",
    "TokenMalformed",
    "UnknownApproval",
    "UnknownCredential",
    "UnknownReviewer",
]


class ApprovalError(SignoffError):
    """Base of the approval errors."""

    def __init__(self, approval_id: str, message: str) -> None:
        super().__init__(f"approval {approval_id}: {message}")
        self.approval_id = approval_id


class UnknownApproval(ApprovalError):
    def __init__(self, approval_id: str) -> None:
        super().__init__(approval_id, "no such approval")


class ApprovalPending(ApprovalError):
    """The approval has no final decision yet."""

    def __init__(self, approval_id: str) -> None:
        super().__init__(approval_id, "still waiting for a decision")


class ApprovalAlreadyDecided(ApprovalError):
    """The decision was used already (or a decision was given twice); it is never used again.
    `consumed_by` names the task run that used it, when that is the reason."""

    def __init__(self, approval_id: str, message: str, *, consumed_by: str | None = None) -> None:
        super().__init__(approval_id, message)
        self.consumed_by = consumed_by


class ApprovalExpired(ApprovalError):
    """The approval expired before it was decided: denied by default."""

    def __init__(self, approval_id: str) -> None:
        super().__init__(approval_id, "expired before a decision; denied")


class DecisionNotAllowed(ApprovalError):
    """The policy does not allow this decision or this reviewer."""


class DecisionForged(ApprovalError):
    """The approval's stream does not prove its decision: a bad or missing signature or MAC, a
    row that disagrees with its stream. Nothing runs."""


class PolicyViolation(ApprovalError):
    """The approval's signed decisions do not meet its policy (an approver it does not name,
    self-approval, a quorum not met, a decision after expiry). Nothing runs."""


class InvalidApprovalRequest(SignoffError, ValueError):
    """A request or decision is malformed (for example edited arguments that are not a JSON
    object); nothing was recorded."""


class InvalidReviewerId(InvalidApprovalRequest):
    """A reviewer id (or group name) that is empty, too long, or holds whitespace, control or
    format characters or separators once normalised; nothing was recorded.

    Attributes:
        value: the id as given (shown with `repr`, so hidden characters are visible).
    """

    def __init__(self, value: object, problem: str) -> None:
        super().__init__(f"reviewer id {value!r} {problem}")
        self.value = value


class UnknownReviewer(SignoffError):
    """The reviewer is not (or no longer) in the reviewer directory."""

    def __init__(self, reviewer_id: str, message: str = "is not in the reviewer directory") -> None:
        super().__init__(f"reviewer {reviewer_id}: {message}")
        self.reviewer_id = reviewer_id


class TokenError(SignoffError):
    """Base of the resume-token errors."""


class TokenMalformed(TokenError):
    """Not a resume token at all."""


class TokenForged(TokenError):
    """The token's MAC does not verify: altered or made without the key."""


class TokenBindingMismatch(TokenError):
    """The token is for another run, tool, argument set or call."""


class CredentialError(SignoffError):
    """Base of the errors of API tokens (`approvals.credentials`). The service answers every
    refused token with one message (`PUBLIC_MESSAGE`), whichever subclass refused it."""

    PUBLIC_MESSAGE = "invalid token"


class InvalidCredential(CredentialError):
    """Not a token of this database: malformed, unknown, or the wrong secret."""

    def __init__(self, message: str = "not a valid API token") -> None:
        super().__init__(message)


class CredentialExpired(CredentialError):
    """The token is past its expiry."""

    def __init__(self, token_id: str) -> None:
        super().__init__(f"API token {token_id} has expired")
        self.token_id = token_id


class CredentialRevoked(CredentialError):
    """The token was revoked."""

    def __init__(self, token_id: str) -> None:
        super().__init__(f"API token {token_id} was revoked")
        self.token_id = token_id


class CredentialScopeRefused(CredentialError):
    """A credential that authenticates, but in a scope this door does not admit: an agent's
    at the HTTP service, a reviewer's or an auditor's at the MCP gateway."""

    def __init__(self, credential: str, scope: str, admitted: str) -> None:
        super().__init__(f"credential {credential or '?'} has scope {scope}, not {admitted}")
        self.credential = credential
        self.scope = scope


class UnknownCredential(CredentialError):
    """No token has this id (to list or revoke)."""

    def __init__(self, token_id: str) -> None:
        super().__init__(f"no API token {token_id!r} (see `signoff tokens list`)")
        self.token_id = token_id
