"""The `approvals` table as a fold over the `approval:<id>` streams: pure, no I/O.

The store folds the events it appends onto the row it locked and writes the result, and
`rebuild` folds whole streams; both use `apply`, so a rebuild equals the live table by
construction, and a test checks that it does.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from .model import STATUS_OF, Approval, ApprovalPolicy, ApprovalStatus, DecisionKind, Review

__all__ = ["STREAM_PREFIX", "apply", "approval_id_of", "stream_of"]

STREAM_PREFIX = "approval:"


def stream_of(approval_id: str) -> str:
    return STREAM_PREFIX + approval_id


def approval_id_of(stream_id: str) -> str:
    return stream_id.removeprefix(STREAM_PREFIX)


def _time(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


def _deciders(state: Approval, review: Review, recorded: list[str] | str) -> tuple[str, ...]:
    """Who made a final decision: the event's list. Events written before that list existed
    hold the names joined with commas, which a name may contain; the reviews say the same
    unambiguously (every approver of an approval, else the one reviewer), so use them."""
    if isinstance(recorded, list):
        return tuple(recorded)
    if review.decision is DecisionKind.APPROVE:
        return tuple(sorted(state.approvers))
    return (review.reviewer,)


def apply(
    state: Approval | None,
    approval_id: str,
    version: int,
    type_: str,
    data: dict[str, Any],
    actor: str,
) -> Approval:
    """The approval after one more event of its stream."""
    if type_ == "approval.requested":
        requested_at = datetime.fromisoformat(data["requested_at"])
        return Approval(
            approval_id=approval_id,
            run_id=data["run_id"],
            thread_id=data["thread_id"],
            tool=data["tool"],
            kind=data["kind"],
            call_id=data["call_id"],
            args_digest=data["args_digest"],
            binding=data["binding"],
            requested_by=actor,
            policy=ApprovalPolicy.from_json(data["policy"]),
            status=ApprovalStatus.PENDING,
            requested_at=requested_at,
            expires_at=_time(data["expires_at"]),
            thread_config=data["thread_config"],
            version=version,
        )
    if state is None:
        raise ValueError(f"approval {approval_id}: {type_} before approval.requested")
    if type_ == "approval.decided":
        review = Review.from_json(data)
        state = replace(state, reviews=(*state.reviews, review))
        if data["final"]:
            state = replace(
                state,
                status=STATUS_OF[review.decision],
                decided_by=_deciders(state, review, data["decided_by"]),
                decided_at=review.at,
            )
    elif type_ in ("approval.expired", "approval.cancelled"):
        status = ApprovalStatus.EXPIRED if type_ == "approval.expired" else ApprovalStatus.CANCELLED
        state = replace(state, status=status, decided_by=(actor,), decided_at=_time(data["at"]))
    elif type_ == "approval.consumed":
        state = replace(state, consumed_by=data["task_run_id"], consumed_at=_time(data["at"]))
    else:
        raise ValueError(f"approval {approval_id}: unknown event type {type_!r}")
    return replace(state, version=version)
