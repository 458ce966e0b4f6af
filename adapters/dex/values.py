"""The values that cross Dex: Step inputs, the decide RPC's input and output, the wake-up
signal on the decisions channel. Plain dataclasses, encoded by Dex's own codecs (JSON).

A Flow's run in Signoff is its Dex Flow ID: every Step of one tool call uses
`ToolCall(run_id=<flowId>, call_id=<toolCallId>, turn_id=<turnId>)`, so the idempotency key a
tool receives is `<flowId>/<turnId>/<toolCallId>`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from approvals import (
    Approval,
    ApprovalStatus,
    Decision,
    DecisionKind,
    InvalidApprovalRequest,
    RequestContext,
    Reviewer,
)
from ledger.calls.model import CallOutcome, CallStatus

__all__ = [
    "ApprovalSignal",
    "DecideRequest",
    "DecideResult",
    "ToolCallRequest",
    "ToolCallResult",
    "channel_key",
]


def channel_key(call_id: str) -> str:
    """The decisions-channel instance of a tool call: its id with `%` and `/` escaped (Dex
    map instances may not contain `/`). Distinct call ids give distinct keys.

    Raises:
        ValueError: an empty call id.
    """
    if not call_id.strip():
        raise ValueError("a tool call id must be a non-empty string")
    return call_id.replace("%", "%25").replace("/", "%2F")


@dataclass(frozen=True)
class ToolCallRequest:
    """One tool call a model asked for: the Flow's start input, and every Step's input.

    Attributes:
        call_id: the model's tool call id, unique within the Flow (the run).
        tool: the tool's name, as registered with `SignoffDex`.
        args: the arguments (a JSON object).
        turn_id: the model turn within the Flow; part of the idempotency key.
        requested_by: who asks (the agent); may not approve its own request unless the
            approval policy allows it.
        checkpoint_id: an agent session's call: `args` is empty and the arguments are read
            from this encrypted checkpoint of the session's thread (never held by Dex).
        reason, last_user_message: what led to the call (the agent's stated reason, the last
            thing its user said), shown to reviewers and sealed with the approval request
            (`approvals.RequestContext`, cut to what reviewers read). Given by whoever starts
            the Flow, they are in its input as Dex stores it; an agent session's call leaves
            them empty and the Step reads them from the checkpoint with the arguments.
    """

    call_id: str
    tool: str
    args: dict[str, Any]
    turn_id: str = "0"
    requested_by: str = "agent"
    checkpoint_id: str | None = None
    reason: str | None = None
    last_user_message: str | None = None

    @property
    def context(self) -> RequestContext | None:
        """What led to the call, as an approval request records it (None: nothing said)."""
        return RequestContext.captured(self.reason, self.last_user_message)


@dataclass(frozen=True)
class ToolCallResult:
    """What the call came to (the Flow's output by default).

    Attributes:
        status: succeeded, failed, outcome_unknown, denied or responded.
        result: the tool's value, or the reviewer's answer for `responded`. It is stored by
            Dex as the Step's output (Signoff keeps its own copy encrypted).
        error: why it failed or was denied.
        replayed: the ledger had the outcome already; the tool did not run in this Step.
    """

    call_id: str
    status: CallStatus
    result: Any
    error: str | None
    replayed: bool
    attempts: int
    approval_id: str | None
    idempotency_key: str

    @classmethod
    def of(cls, outcome: CallOutcome, idempotency_key: str) -> ToolCallResult:
        return cls(
            call_id=outcome.call_id,
            status=outcome.status,
            result=outcome.result,
            error=outcome.error,
            replayed=outcome.replayed,
            attempts=outcome.attempts,
            approval_id=outcome.approval_id,
            idempotency_key=idempotency_key,
        )


@dataclass(frozen=True)
class DecideRequest:
    """The decide RPC's input: one reviewer's decision on one approval of one tool call."""

    approval_id: str
    call_id: str
    kind: DecisionKind
    reviewer: str  # its groups are the reviewer directory's, never the RPC caller's
    reason: str | None = None
    args: dict[str, Any] | None = None
    message: str | None = None

    @classmethod
    def of(cls, approval: Approval, decision: Decision, reviewer: Reviewer | str) -> DecideRequest:
        who = Reviewer(reviewer) if isinstance(reviewer, str) else reviewer
        if who.groups:  # the RPC carries the id only: groups are the directory's
            raise InvalidApprovalRequest(
                f"reviewer {who.id}: groups come from the reviewer directory, not the caller"
            )
        return cls(
            approval_id=approval.approval_id,
            call_id=approval.call_id,
            kind=decision.kind,
            reviewer=who.id,
            reason=decision.reason,
            args=decision.args,
            message=decision.message,
        )

    @property
    def decision(self) -> Decision:
        return Decision(self.kind, reason=self.reason, args=self.args, message=self.message)

    @property
    def who(self) -> Reviewer:
        return Reviewer(self.reviewer)


@dataclass(frozen=True)
class DecideResult:
    """The decide RPC's output.

    Attributes:
        status: the approval's status after this decision.
        duplicate: the same decision was recorded before (a repeated delivery); nothing new
            was written.
        signalled: the RPC published the wake-up for the waiting Step (False when the
            approval is not final yet, was used already, or a wake-up is still pending).
    """

    approval_id: str
    status: ApprovalStatus
    duplicate: bool
    signalled: bool = False


@dataclass(frozen=True)
class ApprovalSignal:
    """The message on the decisions channel. Only a wake-up: the waiting Step reads the
    decision from the store, never from the message."""

    approval_id: str
    status: ApprovalStatus
