"""The `approvals` table as a projection of the `approval:<id>` streams: pure, no I/O.

`ApprovalProjection` is the fold rule and the row mapping; `ledger.journal.projection` folds
with it, writes the row in the same statement as the events, and rebuilds the table from the
journal to check it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from ledger.errors import ProjectionError, UnknownEventType
from ledger.journal.projection import Fact, Projection

from .model import STATUS_OF, Approval, ApprovalPolicy, ApprovalStatus, Review

__all__ = [
    "APPROVALS",
    "NOTIFY_CHANNEL",
    "REQUESTS_CHANNEL",
    "STREAM_PREFIX",
    "ApprovalProjection",
    "approval_id_of",
    "row_to_approval",
    "stream_of",
]

STREAM_PREFIX = "approval:"
NOTIFY_CHANNEL = "signoff_approvals"  # an approval became final: its waiters read it again
REQUESTS_CHANNEL = "signoff_approval_requests"  # a new request (reviewers' live feeds)

COLUMNS = """
approval_id, run_id, thread_id, tool, kind, call_id, args_digest, binding, requested_by,
policy::text AS policy, status, reviews::text AS reviews, decided_by, decided_at, expires_at,
consumed_by, consumed_at, thread_config::text AS thread_config, requested_at, version
"""


def stream_of(approval_id: str) -> str:
    return STREAM_PREFIX + approval_id


def approval_id_of(stream_id: str) -> str:
    return stream_id.removeprefix(STREAM_PREFIX)


def _time(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


def _deciders(event: Fact) -> tuple[str, ...]:
    """Who made a final decision: the event's list (whole names: a name may hold a comma)."""
    recorded = event.data["decided_by"]
    if not isinstance(recorded, list) or not all(isinstance(n, str) for n in recorded):
        problem = f"version {event.version}: decided_by is not a list of names"
        raise ProjectionError(event.stream_id, problem)
    return tuple(recorded)


def row_to_approval(row: Mapping[str, Any]) -> Approval:
    config = row["thread_config"]
    return Approval(
        approval_id=row["approval_id"],
        run_id=row["run_id"],
        thread_id=row["thread_id"],
        tool=row["tool"],
        kind=row["kind"],
        call_id=row["call_id"],
        args_digest=row["args_digest"],
        binding=row["binding"],
        requested_by=row["requested_by"],
        policy=ApprovalPolicy.from_json(json.loads(row["policy"])),
        status=ApprovalStatus(row["status"]),
        requested_at=row["requested_at"],
        expires_at=row["expires_at"],
        decided_by=tuple(row["decided_by"] or ()),
        decided_at=row["decided_at"],
        consumed_by=row["consumed_by"],
        consumed_at=row["consumed_at"],
        reviews=tuple(Review.from_json(r) for r in json.loads(row["reviews"])),
        thread_config=None if config is None else json.loads(config),
        version=row["version"],
    )


class ApprovalProjection(Projection[Approval]):
    """The `approvals` table. A second request for the same (run, call, arguments) meets the
    first one's row and writes nothing: the caller returns that approval. Only a decision
    changes the reviews, and only a decision, expiry or cancelling who decided, and only a
    consumption who consumed (the database's `signoff_commit_approval` checks it)."""

    table = "approvals"
    key = ("approval_id",)
    stream_prefix = STREAM_PREFIX
    columns = COLUMNS
    write_function = "signoff_commit_approval"
    # The columns of `to_row` but the version, which the function sets;
    # `policy`, `reviews` and `thread_config` are JSON text for its jsonb parameters.
    row_parameters = (
        "approval_id",
        "run_id",
        "thread_id",
        "tool",
        "kind",
        "call_id",
        "args_digest",
        "binding",
        "requested_by",
        "policy",
        "status",
        "reviews",
        "decided_by",
        "decided_at",
        "expires_at",
        "consumed_by",
        "consumed_at",
        "thread_config",
        "requested_at",
    )

    def stream_of(self, record: Approval) -> str:
        return stream_of(record.approval_id)

    def label(self, record: Approval) -> str:
        return record.approval_id

    def from_row(self, row: Mapping[str, Any]) -> Approval:
        return row_to_approval(row)

    def to_row(self, record: Approval) -> dict[str, Any]:
        a = record
        return {
            "approval_id": a.approval_id,
            "run_id": a.run_id,
            "thread_id": a.thread_id,
            "tool": a.tool,
            "kind": a.kind,
            "call_id": a.call_id,
            "args_digest": a.args_digest,
            "binding": a.binding,
            "requested_by": a.requested_by,
            "policy": json.dumps(a.policy.to_json()),
            "status": a.status,
            "reviews": json.dumps([r.to_json() for r in a.reviews]),
            "decided_by": list(a.decided_by) or None,
            "decided_at": a.decided_at,
            "expires_at": a.expires_at,
            "consumed_by": a.consumed_by,
            "consumed_at": a.consumed_at,
            "thread_config": None if a.thread_config is None else json.dumps(a.thread_config),
            "requested_at": a.requested_at,
            "version": a.version,
        }

    def notify(self, before: Approval | None, after: Approval) -> str | None:
        # Wake listeners only for what they wait for: a request becoming final (agents and
        # feeds), a new request (feeds only, on a channel of its own: an agent waiting for its
        # request's decision would be woken by the request itself). Votes and consumptions
        # reach feeds by their poll.
        if after.status.final and (before is None or not before.status.final):
            return NOTIFY_CHANNEL
        return REQUESTS_CHANNEL if before is None else None

    def apply(self, record: Approval | None, event: Fact) -> Approval:
        return _apply(record, event)


def _apply(state: Approval | None, event: Fact) -> Approval:
    """The approval after one more event of its stream."""
    approval_id, version, type_ = approval_id_of(event.stream_id), event.version, event.type
    data, actor = event.data, event.actor
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
        raise ProjectionError(event.stream_id, f"{type_} before approval.requested")
    # One `replace` per event: folds run for every write and every check of a stream.
    if type_ == "approval.decided":
        review = Review.from_json(data)
        reviews = (*state.reviews, review)
        if not data["final"]:
            return replace(state, reviews=reviews, version=version)
        return replace(
            state,
            reviews=reviews,
            status=STATUS_OF[review.decision],
            decided_by=_deciders(event),
            decided_at=review.at,
            version=version,
        )
    if type_ in ("approval.expired", "approval.cancelled"):
        status = ApprovalStatus.EXPIRED if type_ == "approval.expired" else ApprovalStatus.CANCELLED
        return replace(
            state, status=status, decided_by=(actor,), decided_at=_time(data["at"]), version=version
        )
    if type_ == "approval.consumed":
        return replace(
            state,
            consumed_by=data["task_run_id"],
            consumed_at=_time(data["at"]),
            version=version,
        )
    raise UnknownEventType(event.stream_id, type_)


APPROVALS = ApprovalProjection()
