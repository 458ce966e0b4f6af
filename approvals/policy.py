"""The approval policy: one pure function that says what is wrong with one more decision.

The store asks it before it records a decision, and `ledger verify` asks it again of every
signed decision in a stream (`integrity.approval_problems`): both must judge alike, so the
rules live here only. Ids are compared in their normal form (`identity`): two spellings of
one person are one reviewer, for self-approval and for the quorum alike.

The decider is a reviewer (a signed decision) or a self-confirmation (the person at the agent,
`SelfConfirmation`): a self-confirmation decides only the self-confirm tier; a reviewer decides a
policy that names no approvers only when the reviewer directory lists it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from .identity import same_id
from .model import (
    ApprovalPolicy,
    ApprovalTier,
    DecisionKind,
    Reviewer,
    SelfConfirmation,
    is_expired,
)

__all__ = ["PolicyRefusal", "PolicyRule", "policy_problem"]


class PolicyRule(StrEnum):
    """The rule a refused decision breaks."""

    KIND = "kind"  # a decision the policy does not allow
    SELF_APPROVAL = "self_approval"  # the requester deciding its own request
    APPROVER = "approver"  # a reviewer the approvers do not name (by id or group)
    QUORUM_KIND = "quorum_kind"  # edit or respond where a quorum must approve
    TWICE = "twice"  # one reviewer approving again: the quorum counts people
    EXPIRED = "expired"  # decided at or after the request's expiry
    TIER = "tier"  # a self-confirmation of a four-eyes approval
    DIRECTORY = "directory"  # a reviewer the directory does not list, where no approver is named


@dataclass(frozen=True, slots=True)
class PolicyRefusal:
    """Why the policy refuses a decision."""

    rule: PolicyRule
    message: str

    def __str__(self) -> str:
        return self.message


def policy_problem(
    policy: ApprovalPolicy,
    kind: DecisionKind,
    reviewer: Reviewer | SelfConfirmation,
    *,
    earlier_approvers: Iterable[str],
    requested_by: str,
    at: datetime,
    expires_at: datetime | None,
) -> PolicyRefusal | None:
    """What the policy says against `reviewer` deciding `kind` at `at` (None: it allows it).

    Args:
        reviewer: the deciding reviewer with the groups that vouch for it (the directory's
            when deciding, the signed decision's when verifying) and whether the directory
            lists it; or the self-confirmation of the person at the agent.
        earlier_approvers: who approved this request before, in any spelling.
        requested_by: the requester, as recorded (compared in normal form, never refused).
    """
    if kind not in policy.allowed:
        return PolicyRefusal(PolicyRule.KIND, f"the policy does not allow {kind}")
    if isinstance(reviewer, SelfConfirmation):
        if policy.tier is not ApprovalTier.SELF_CONFIRM:
            return PolicyRefusal(
                PolicyRule.TIER,
                "a four-eyes approval is decided by an authenticated reviewer (a signed "
                "decision), never confirmed at the agent",
            )
        if is_expired(expires_at, at):
            return PolicyRefusal(PolicyRule.EXPIRED, "decided after it expired")
        return None
    rid = reviewer.id
    if same_id(rid, requested_by) and not policy.allow_self_approval:
        return PolicyRefusal(PolicyRule.SELF_APPROVAL, f"{rid} requested it and may not decide it")
    if not reviewer.matches(policy.approvers):
        return PolicyRefusal(PolicyRule.APPROVER, f"{rid} is not an approver of this tool")
    if not policy.approvers and not reviewer.listed:
        return PolicyRefusal(
            PolicyRule.DIRECTORY,
            f"{rid} is not in the reviewer directory; a policy that names no approvers admits "
            "only the reviewers it lists",
        )
    if policy.quorum > 1 and kind in (DecisionKind.EDIT, DecisionKind.RESPOND):
        return PolicyRefusal(PolicyRule.QUORUM_KIND, "with a quorum only approve or reject")
    if kind is DecisionKind.APPROVE and any(same_id(rid, a) for a in earlier_approvers):
        return PolicyRefusal(
            PolicyRule.TWICE,
            f"{rid} approved already; {policy.quorum} distinct reviewers needed",
        )
    if is_expired(expires_at, at):
        return PolicyRefusal(PolicyRule.EXPIRED, "decided after it expired")
    return None
