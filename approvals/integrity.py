"""What an approval's stream proves: signed decisions, MACed records, and its policy re-applied.

Who writes what:

- the reviewer side (holding the reviewer KEK) appends `approval.decided` events signed by the
  decision key (`ledger.keys.attest.Statement`: the binding, the approval id, the decision kind
  and the digest of its payload, the reviewer and its groups, the time, the key id), and signs
  sticky grants (`approval.granted` in `grant:<id>`) the same way;
- workers append `approval.requested`, `approval.consumed`, `approval.expired`, the
  `approval.decided` of a grant (carrying the signed grant) and a self-confirmation (the
  self-confirm tier's decision at the agent, `confirm`), each with a record MAC under the
  approval-MAC key (`ledger.keys.attest.mac_record`) over the event and the approval's binding;
  `approval.cancelled` is MACed too, whoever cancels: a worker withdraws a request only in its
  requester's name; a cancellation in anyone else's is the reviewer side's, signed
  (`cancel_statement`). An expiry names no one (`signoff`) and comes at or after the expiry.

The binding stays the plain SHA-256 `binding_of` (an auditor recomputes it from the request's
fields), and is authenticated by the request's MAC and by every signature, which cover it.

`approval_problems` checks a whole stream: every MAC and signature, the binding against the
request, and the policy re-applied from the events alone (allowed kinds, approvers with the
groups the signed decision names, no self-approval, a quorum of distinct reviewers, expiry).
An event that lacks its MAC or signature is reported `unsigned` (only a writer without the key
makes one); workers refuse it, and `ledger verify` reports it as a finding: nothing Signoff
wrote was ever unsigned.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol

from ledger.canonical import format_time, json_digest
from ledger.journal import NewEvent
from ledger.journal.projection import Fact
from ledger.keys import KeyRing
from ledger.keys.attest import (
    Statement,
    mac_record,
    record_mac_ok,
    sign_statement,
    statement_ok,
)
from ledger.store import Database

from . import _sql
from .model import ApprovalPolicy, DecisionKind, Review, Reviewer, binding_of
from .policy import policy_problem
from .projection import approval_id_of

__all__ = [
    "ProblemKind",
    "StreamProblem",
    "approval_problems",
    "as_facts",
    "cancel_statement",
    "every_approval_problem",
    "grant_statement",
    "mac_events",
    "policy_problem",
    "review_statement",
    "sign_cancellation",
    "sign_review",
]

DECIDED = "approval.decided"
CLOSED_BY = "signoff"  # the actor of an expiry: the time, not a person, ended the request


class ProblemKind(StrEnum):
    UNSIGNED = "unsigned"  # no MAC or signature: written by someone without the key
    FORGED = "forged"  # a bad MAC or signature, malformed, out of order
    POLICY = "policy"  # signed, but the policy does not allow it


@dataclass(frozen=True, slots=True)
class StreamProblem:
    approval_id: str
    version: int
    kind: ProblemKind
    message: str

    def __str__(self) -> str:
        return f"approval {self.approval_id} (version {self.version}): {self.message}"


class Recorded(Protocol):
    """An event as the journal returns it (`Event`) or a fold sees it (`Fact`)."""

    @property
    def stream_id(self) -> str: ...
    @property
    def version(self) -> int: ...
    @property
    def type(self) -> str: ...
    @property
    def actor(self) -> str: ...
    @property
    def data(self) -> dict[str, Any]: ...


def as_facts(events: Sequence[Recorded]) -> list[Fact]:
    return [Fact(e.stream_id, e.version, e.type, e.data, e.actor) for e in events]


# -- signing and MACs ----------------------------------------------------------------------


def review_statement(binding: str, approval_id: str, review: Review) -> Statement:
    return Statement(
        binding=binding,
        subject=approval_id,
        kind=str(review.decision),
        payload=review.payload(),
        reviewer=review.reviewer,
        groups=review.groups,
        at=format_time(review.at),
    )


def sign_review(ring: KeyRing, binding: str, approval_id: str, review: Review) -> Review:
    """The review signed by the reviewer side (raises `ReviewerKekMissing` on a worker)."""
    signed = sign_statement(ring, review_statement(binding, approval_id, review))
    return replace(review, signature=signed)


def cancel_statement(
    binding: str, approval_id: str, by: str, at: str, reason_sealed: str | None = None
) -> Statement:
    """What a reviewer's `approval.cancelled` is signed over (`at`: the event's `at`; its
    sealed reason, when it gives one)."""
    return Statement(
        binding=binding,
        subject=approval_id,
        kind="cancel",
        payload={} if reason_sealed is None else {"reason_sealed": reason_sealed},
        reviewer=by,
        groups=(),
        at=format_time(datetime.fromisoformat(at)),
    )


def sign_cancellation(ring: KeyRing, binding: str, approval_id: str, event: NewEvent) -> NewEvent:
    """The cancellation signed by the reviewer side in its actor's name (raises
    `ReviewerKekMissing` on a worker)."""
    statement = cancel_statement(
        binding, approval_id, event.actor, event.data["at"], event.data.get("reason_sealed")
    )
    return NewEvent(
        event.type, {**event.data, "signature": sign_statement(ring, statement)}, event.actor
    )


_GRANT_TERMS = ("run_id", "tool", "until")


def grant_statement(grant: Mapping[str, Any]) -> Statement:
    """The statement of a sticky grant (`approval.granted`'s data, signature aside)."""
    return Statement(
        binding=json_digest(["signoff.grant.v1", grant["run_id"], grant["tool"]]),
        subject=grant["grant_id"],
        kind="grant",
        payload={name: grant[name] for name in _GRANT_TERMS},
        reviewer=grant["granted_by"],
        groups=tuple(grant["groups"]),
        at=format_time(datetime.fromisoformat(grant["at"])),
    )


def mac_events(
    ring: KeyRing, binding: str, stream_id: str, base_version: int, events: Sequence[NewEvent]
) -> list[NewEvent]:
    """`events`, about to follow version `base_version` of `stream_id`, each MACed; a
    reviewer's decision is left as it is (its signature covers it)."""
    out = []
    for version, event in enumerate(events, start=base_version + 1):
        if event.type == DECIDED and "grant" not in event.data and not _confirmed(event.data):
            out.append(event)
            continue
        data = mac_record(ring, binding, stream_id, version, event.type, event.actor, event.data)
        out.append(NewEvent(event.type, data, event.actor))
    return out


# -- the policy, re-applied (`policy`: the rules the store decided by) --------------------


@dataclass
class _Tally:
    """The decisions so far of one approval, as the replay counts them."""

    approvers: list[str]
    final: bool = False
    consumed: bool = False


async def approval_problems(ring: KeyRing, events: Sequence[Recorded]) -> list[StreamProblem]:
    """Everything wrong with one approval stream's events (oldest first): bad or missing MACs
    and signatures, a binding that is not its request's, a policy its decisions break, events
    out of order. Empty when the stream proves its state."""
    if not events:
        return []
    approval_id = approval_id_of(events[0].stream_id)
    problem = _Problems(approval_id)
    problems = problem.found
    first = events[0]
    if first.type != "approval.requested":
        problem(first, ProblemKind.FORGED, f"the stream starts with {first.type}")
        return problems
    try:
        request = first.data
        binding = request["binding"]
        expected = binding_of(
            request["run_id"],
            request["tool"],
            request["kind"],
            request["args_digest"],
            request["call_id"],
            approval_id,
        )
        policy = ApprovalPolicy.from_json(request["policy"])
        expires = request["expires_at"]
        expires_at = None if expires is None else datetime.fromisoformat(expires)
    except (KeyError, TypeError, ValueError) as e:
        problem(first, ProblemKind.FORGED, f"a malformed request: {e!r}")
        return problems
    if binding != expected:
        problem(first, ProblemKind.FORGED, "its binding is not its request's")
    await _mac(ring, binding, first, problem)
    req = _Request(approval_id, binding, request, first.actor, policy, expires_at)
    tally = _Tally([])
    for event in events[1:]:
        try:
            await _step(ring, req, tally, event, problem)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            problem(event, ProblemKind.FORGED, f"a malformed {event.type}: {e!r}")
    return problems


async def every_approval_problem(db: Database, ring: KeyRing) -> list[StreamProblem]:
    """`approval_problems` of every approval stream in the journal, read in one snapshot."""
    problems: list[StreamProblem] = []
    stream: list[Fact] = []
    async with (
        db.connection() as conn,
        conn.transaction(isolation="repeatable_read", readonly=True),
    ):
        async for row in conn.cursor(_sql.EVERY_APPROVAL_EVENT, prefetch=2000):
            fact = Fact(
                row["stream_id"], row["version"], row["type"], json.loads(row["data"]), row["actor"]
            )
            if stream and stream[0].stream_id != fact.stream_id:
                problems += await approval_problems(ring, stream)
                stream = []
            stream.append(fact)
    if stream:
        problems += await approval_problems(ring, stream)
    return problems


class _Problems:
    """The problems found in one stream; called to add one."""

    def __init__(self, approval_id: str) -> None:
        self.approval_id = approval_id
        self.found: list[StreamProblem] = []

    def __call__(self, event: Recorded, kind: ProblemKind, message: str) -> None:
        self.found.append(StreamProblem(self.approval_id, event.version, kind, message))


async def _mac(ring: KeyRing, binding: str, event: Recorded, problem: _Problems) -> None:
    wrong = await record_mac_ok(
        ring, binding, event.stream_id, event.version, event.type, event.actor, event.data
    )
    if wrong == "unsigned":
        problem(event, ProblemKind.UNSIGNED, f"{event.type} carries no MAC")
    elif wrong is not None:
        problem(event, ProblemKind.FORGED, f"{event.type}: {wrong}")


@dataclass(frozen=True)
class _Request:
    """What the request event fixes for the rest of the stream."""

    approval_id: str
    binding: str
    data: Mapping[str, Any]
    requested_by: str
    policy: ApprovalPolicy
    expires_at: datetime | None


async def _step(
    ring: KeyRing, req: _Request, tally: _Tally, event: Recorded, problem: _Problems
) -> None:
    data = event.data
    binding, approval_id, request = req.binding, req.approval_id, req.data
    if event.type == DECIDED:
        review = Review.from_json(data)
        before = len(problem.found)
        if _confirmed(data):
            await _mac(ring, binding, event, problem)
            _confirmation_problem(req, tally, review, data, event, problem)
            tally.final = True
            return
        if review.grant_id is not None:
            await _mac(ring, binding, event, problem)
            await _grant_problem(ring, review, event, request, problem)
        else:
            why = await statement_ok(
                ring, review_statement(binding, approval_id, review), review.signature
            )
            if why == "unsigned":
                problem(event, ProblemKind.UNSIGNED, f"{review.reviewer}'s decision is unsigned")
            elif why is not None:
                problem(event, ProblemKind.FORGED, f"{review.reviewer}'s decision: {why}")
        if event.actor != review.reviewer:
            problem(event, ProblemKind.FORGED, f"appended by {event.actor} for {review.reviewer}")
        # The policy is re-applied to what is signed only: an unsigned decision's groups and
        # deciders vouch for nothing, and it is reported as unsigned already.
        signed = not any(p.kind is ProblemKind.UNSIGNED for p in problem.found[before:])
        if signed:
            _decision_policy(req, tally, review, data, event, problem)
        if review.decision is DecisionKind.APPROVE:
            tally.approvers.append(review.reviewer)
        tally.final = tally.final or bool(data["final"])
    elif event.type in ("approval.expired", "approval.cancelled"):
        await _mac(ring, binding, event, problem)
        if event.type == "approval.expired":
            _expiry_problem(req, event, problem)
        else:
            await _cancel_problem(ring, req, event, problem)
        if tally.final:
            problem(event, ProblemKind.FORGED, f"{event.type} after the approval was final")
        tally.final = True
    elif event.type == "approval.consumed":
        await _mac(ring, binding, event, problem)
        if not tally.final:
            problem(event, ProblemKind.FORGED, "consumed before it was final")
        if tally.consumed:
            problem(event, ProblemKind.FORGED, "consumed twice")
        tally.consumed = True
    else:
        problem(event, ProblemKind.FORGED, f"an unknown event type {event.type}")


def _expiry_problem(req: _Request, event: Recorded, problem: _Problems) -> None:
    """An expiry names no one and comes once the request is due."""
    if event.actor != CLOSED_BY:
        problem(event, ProblemKind.FORGED, f"an expiry in the name of {event.actor}")
    at = datetime.fromisoformat(event.data["at"])
    if req.expires_at is None or at < req.expires_at:
        problem(event, ProblemKind.POLICY, "expired before its expiry")


async def _cancel_problem(
    ring: KeyRing, req: _Request, event: Recorded, problem: _Problems
) -> None:
    """A cancellation is the requester's own (MACed), or a reviewer's, signed."""
    signed = event.data.get("signature")
    if signed is None and event.actor == req.requested_by:
        return
    statement = cancel_statement(
        req.binding,
        req.approval_id,
        event.actor,
        event.data["at"],
        event.data.get("reason_sealed"),
    )
    why = await statement_ok(ring, statement, signed)
    if why == "unsigned":
        problem(event, ProblemKind.UNSIGNED, f"{event.actor}'s cancellation is unsigned")
    elif why is not None:
        problem(event, ProblemKind.FORGED, f"{event.actor}'s cancellation: {why}")


def _decision_policy(
    req: _Request,
    tally: _Tally,
    review: Review,
    data: Mapping[str, Any],
    event: Recorded,
    problem: _Problems,
) -> None:
    """The policy against one more signed decision, and what the event says it makes final."""
    policy = req.policy
    if tally.final:
        problem(event, ProblemKind.POLICY, "a decision after the approval was final")
        return
    refusal = policy_problem(
        policy,
        review.decision,
        # Signed by the reviewer side, which checked the directory when it decided.
        Reviewer(review.reviewer, frozenset(review.groups), listed=True),
        earlier_approvers=tally.approvers,
        requested_by=req.requested_by,
        at=review.at,
        expires_at=req.expires_at,
    )
    if refusal is not None:
        problem(event, ProblemKind.POLICY, refusal.message)
    if review.decision is DecisionKind.APPROVE:
        approvers = {*tally.approvers, review.reviewer}
        final, deciders = len(approvers) >= policy.quorum, sorted(approvers)
    else:
        final, deciders = True, [review.reviewer]
    if bool(data["final"]) != final:
        problem(
            event,
            ProblemKind.POLICY,
            f"it says final={bool(data['final'])}, but {len(approvers)} of {policy.quorum} "
            f"approvals make it final={final}"
            if review.decision is DecisionKind.APPROVE
            else f"a {review.decision} is final",
        )
    elif final and data.get("decided_by") != deciders:
        problem(event, ProblemKind.POLICY, f"decided_by is not {deciders}")


def _confirmed(data: Mapping[str, Any]) -> bool:
    """Whether an `approval.decided` event is a self-confirmation (`confirm`)."""
    return "self_confirmed" in data


def _confirmation_problem(
    req: _Request,
    tally: _Tally,
    review: Review,
    data: Mapping[str, Any],
    event: Recorded,
    problem: _Problems,
) -> None:
    """A self-confirmation: named as the process that made it and nobody else, final, and
    allowed by the policy (the self-confirm tier only)."""
    who = review.confirmation
    if who is None:  # `self_confirmed: null`
        problem(event, ProblemKind.FORGED, "a self-confirmation that names nobody")
        return
    if review.signature is not None or review.grant is not None or review.grant_id or review.groups:
        problem(event, ProblemKind.FORGED, "a self-confirmation carries a reviewer's signature")
    if review.reviewer != who.name or event.actor != who.name:
        problem(event, ProblemKind.FORGED, f"a self-confirmation by {who.login} names another")
    if tally.final:
        problem(event, ProblemKind.POLICY, "a decision after the approval was final")
        return
    refusal = policy_problem(
        req.policy,
        review.decision,
        who,
        earlier_approvers=tally.approvers,
        requested_by=req.requested_by,
        at=review.at,
        expires_at=req.expires_at,
    )
    if refusal is not None:
        problem(event, ProblemKind.POLICY, f"self-confirmed by {who.login}: {refusal.message}")
    if data["final"] is not True or data.get("decided_by") != [who.name]:
        problem(event, ProblemKind.POLICY, f"a self-confirmation is final, by {who.name}")


async def _grant_problem(
    ring: KeyRing,
    review: Review,
    event: Recorded,
    request: Mapping[str, Any],
    problem: _Problems,
) -> None:
    """Check a grant's approval against the signed grant it carries."""
    grant = review.grant
    if not isinstance(grant, Mapping):
        problem(event, ProblemKind.UNSIGNED, f"grant {review.grant_id} is not carried signed")
        return
    why = await statement_ok(ring, grant_statement(grant), grant.get("signature"))
    if why is not None:
        kind = ProblemKind.UNSIGNED if why == "unsigned" else ProblemKind.FORGED
        problem(event, kind, f"grant {review.grant_id}: {why}")
    if (
        grant["grant_id"] != review.grant_id
        or grant["granted_by"] != review.reviewer
        or tuple(grant["groups"]) != review.groups
        or grant["run_id"] != request["run_id"]
        or grant["tool"] != request["tool"]
    ):
        problem(event, ProblemKind.FORGED, f"grant {review.grant_id} is another grant's")
    at, until = datetime.fromisoformat(grant["at"]), datetime.fromisoformat(grant["until"])
    if not at <= review.at < until:
        problem(event, ProblemKind.POLICY, f"grant {review.grant_id} did not hold then")
