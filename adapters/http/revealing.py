"""What `POST /v1/approvals/{id}/reveal` answers: the approval's document with what is sealed
in it opened for the caller, except the fields its policy marks sensitive unless asked for.

The document is `shapes.approval_document` with the shown arguments (also in its `hitl` and
`agent_inbox` shapes), and:

- `hidden_fields`: the sensitive fields left out (of the arguments and of an edit's), sorted;
  empty when none were;
- `context`: `{"reason", "last_user_message"}`, what led to the call as the adapter captured
  it (each null when it captured none);
- each of `reviews` with its `reason` opened (null when it gave none); the final review of an
  edit with the edited `args` (sensitive fields left out as above), of a respond with its
  `message`;
- `cancel_reason`: a cancelled approval's reason (null when it gave none, or not cancelled).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from approvals import Approval, ApprovalStatus, ApprovalStore, RequestContext
from approvals.presentation import without_sensitive

from .shapes import approval_document

__all__ = ["Revealed", "revealed_document"]


@dataclass(frozen=True)
class Revealed:
    """A reveal's answer, and whether it shows fields the policy marks sensitive (recorded
    with the reveal)."""

    document: dict[str, Any]
    shows_sensitive: bool


async def revealed_document(
    store: ApprovalStore, approval: Approval, *, sensitive: bool
) -> Revealed:
    """The reveal's document of `approval`, read with `reveal=True`; with `sensitive`, the
    sensitive fields shown too."""
    if approval.args is None:
        raise ValueError("a reveal shows an approval read with reveal=True")
    marked = approval.policy.sensitive
    decision = approval.decision
    edited = decision.args if approval.status is ApprovalStatus.EDITED and decision else None
    args, hidden = without_sensitive(marked, approval.args)
    edited_shown, edited_hidden = without_sensitive(marked, edited or {})
    hidden = sorted({*hidden, *edited_hidden})
    if sensitive:
        args, edited_shown = approval.args, edited or {}
    document = approval_document(approval, args=args)
    document["hidden_fields"] = [] if sensitive else hidden
    document["context"] = (approval.context or RequestContext()).to_json()
    reviews = document["reviews"]
    for shown, review in zip(reviews, approval.reviews, strict=True):
        shown["reason"] = await store.reason_of(approval, review)
    if reviews and decision is not None and approval.status.final:
        if edited is not None:
            reviews[-1]["args"] = edited_shown
        if approval.status is ApprovalStatus.RESPONDED:
            reviews[-1]["message"] = decision.message
    document["cancel_reason"] = await store.cancel_reason_of(approval)
    return Revealed(document, shows_sensitive=sensitive and bool(hidden))
