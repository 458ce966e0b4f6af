"""An approval as JSON, the one shape every adapter shows it in (the CLI's `--json`, the HTTP
service). Its arguments and the contents of its decision are left out: revealing them is a
separate, recorded act of the caller's."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from approvals import Approval, ApprovalPolicy, ApprovalTier
from approvals.identity import GROUP_PREFIX

__all__ = ["approval_json", "description_of", "policy_text"]


def _when(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def description_of(approval: Approval) -> str:
    """What reviewers are told the request is: the policy's description, else a question."""
    return approval.policy.description or f"Approve {approval.tool}?"


def policy_text(policy: ApprovalPolicy) -> str:
    """Who decides, in reviewers' words: "one of support-leads", "alice or bob", "2 of: alice,
    bob, carol", "any reviewer in the directory", "self-confirm"."""
    if policy.tier is ApprovalTier.SELF_CONFIRM:
        return "self-confirm (the person at the agent, or any reviewer in the directory)"
    if policy.any_reviewer:
        if policy.quorum == 1:
            return "any reviewer in the directory"
        return f"{policy.quorum} reviewers in the directory"
    people = sorted(a for a in policy.approvers if not a.startswith(GROUP_PREFIX))
    groups = sorted(a.removeprefix(GROUP_PREFIX) for a in policy.approvers if a not in people)
    if policy.quorum > 1:
        names = people + [f"members of {g}" for g in groups]
        return f"{policy.quorum} of: {', '.join(names)}"
    names = people + [f"one of {g}" for g in groups]
    return " or ".join(names)


def approval_json(approval: Approval) -> dict[str, Any]:
    """The approval's request, policy, reviews (without ciphertexts), votes and state; its
    `tier` (`self_confirm`: the person at the agent may confirm it; `four_eyes`: only an
    authenticated reviewer decides), who decides in plain words (`policy_text`) and, when it
    was confirmed at the agent, who confirmed it (`self_confirmed`: the database login, host
    and pid), else None."""
    confirmed = approval.self_confirmed
    return {
        "approval_id": approval.approval_id,
        "run_id": approval.run_id,
        "thread_id": approval.thread_id,
        "tool": approval.tool,
        "kind": approval.kind,
        "call_id": approval.call_id,
        "status": approval.status.value,
        "tier": approval.tier.value,
        "self_confirmed": None if confirmed is None else confirmed.to_json(),
        "requested_by": approval.requested_by,
        "requested_at": _when(approval.requested_at),
        "expires_at": _when(approval.expires_at),
        "decided_by": list(approval.decided_by),
        "decided_at": _when(approval.decided_at),
        "consumed_by": approval.consumed_by,
        "consumed_at": _when(approval.consumed_at),
        "args_digest": approval.args_digest,
        "policy": approval.policy.to_json(),
        "policy_text": policy_text(approval.policy),
        "reviews": [r.to_json(sealed=False) for r in approval.reviews],
        "votes": {"approved_by": list(approval.approvers), "quorum": approval.policy.quorum},
        "version": approval.version,
    }
