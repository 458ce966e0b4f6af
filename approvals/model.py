"""Approval records, decisions and policies: plain values and pure rules, no I/O."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from ledger.canonical import canonical_json
from ledger.keys import KeyRing
from ledger.keys.digests import value_digest
from ledger.limits import name_problem, text_problem

from .errors import InvalidApprovalRequest
from .identity import GROUP_PREFIX, approver, group_name, reviewer_id
from .presentation import args_schema, field_names

if TYPE_CHECKING:
    from .context import RequestContext

__all__ = [
    "SELF_CONFIRMED_BY",
    "Approval",
    "ApprovalPolicy",
    "ApprovalStatus",
    "ApprovalTier",
    "Decision",
    "DecisionKind",
    "Review",
    "Reviewer",
    "SelfConfirmation",
    "args_digest",
    "binding_of",
    "check_decision",
    "has_float",
    "json_object",
]

MAX_TEXT_BYTES = 64 * 1024
"""Longest reason or answer (UTF-8) a decision may carry."""
MAX_ARGS_BYTES = 128 * 1024
"""Largest arguments (canonical JSON) an approval may be asked or edited with: they are sealed
into its journal events."""


class DecisionKind(StrEnum):
    """The decisions, as LangChain's HumanInTheLoopMiddleware names them."""

    APPROVE = "approve"
    REJECT = "reject"  # with a reason the model sees
    EDIT = "edit"  # run with the reviewer's arguments instead
    RESPOND = "respond"  # return the reviewer's answer instead of running the tool


class ApprovalStatus(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EDITED = "edited"
    RESPONDED = "responded"
    EXPIRED = "expired"  # no decision in time: denied
    CANCELLED = "cancelled"

    @property
    def final(self) -> bool:
        return self is not ApprovalStatus.PENDING

    @property
    def runs_tool(self) -> bool:
        return self in (ApprovalStatus.APPROVED, ApprovalStatus.EDITED)


STATUS_OF = {
    DecisionKind.APPROVE: ApprovalStatus.APPROVED,
    DecisionKind.REJECT: ApprovalStatus.REJECTED,
    DecisionKind.EDIT: ApprovalStatus.EDITED,
    DecisionKind.RESPOND: ApprovalStatus.RESPONDED,
}


class ApprovalTier(StrEnum):
    """Who may decide an approval (`ApprovalPolicy.tier`)."""

    SELF_CONFIRM = "self_confirm"
    """The person at the agent confirms through the framework's own resume (LangChain's
    human-in-the-loop model); recorded as self-confirmed by that process and its database
    login, never under a reviewer's name. A reviewer the directory lists may decide it too."""
    FOUR_EYES = "four_eyes"
    """Only an authenticated reviewer decides (a signed decision): the approvers the policy
    names, or with `any_reviewer` any reviewer the directory lists."""


@dataclass(frozen=True)
class Reviewer:
    """A reviewer as the reviewer directory knows it: a normalised id (`reviewer_id`), the
    groups a policy may name as `group:<name>`, and whether the directory lists it at all.

    `ApprovalStore.decide` takes the id alone and reads the groups (and `listed`) from the
    directory in the transaction that records the decision; a `Reviewer` handed to it with
    groups is refused.
    """

    id: str
    groups: frozenset[str] = frozenset()
    listed: bool = field(default=False, compare=False)
    """Whether the directory lists it (active): a policy that names no approvers admits only
    listed reviewers."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "id", reviewer_id(self.id))
        object.__setattr__(self, "groups", frozenset(group_name(g) for g in self.groups))

    def matches(self, approvers: frozenset[str]) -> bool:
        return (
            not approvers
            or self.id in approvers
            or any(f"{GROUP_PREFIX}{g}" in approvers for g in self.groups)
        )


SELF_CONFIRMED_BY = "self-confirmed by "
"""How a self-confirmation names its decider (`SelfConfirmation.name`): the space makes it
something no reviewer id can be (`identity.reviewer_id` refuses whitespace)."""


@dataclass(frozen=True)
class SelfConfirmation:
    """Who confirmed an approval at the agent (the self-confirm tier): the database login the
    process writes with (the database checks it is the session's own), its host and pid."""

    login: str
    host: str
    pid: int

    @property
    def name(self) -> str:
        """The decider as `decided_by`, the review and the event's actor record it."""
        return f"{SELF_CONFIRMED_BY}{self.login}"

    def to_json(self) -> dict[str, Any]:
        return {"login": self.login, "host": self.host, "pid": self.pid}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SelfConfirmation:
        login, host, pid = data["login"], data["host"], data["pid"]
        if not isinstance(login, str) or not isinstance(host, str) or type(pid) is not int:
            raise ValueError(f"a self-confirmation is login, host and pid, not {data!r}")
        return cls(login, host, pid)


@dataclass(frozen=True)
class ApprovalPolicy:
    """What one tool's approvals allow, and who may decide them (`tier`).

    `ApprovalPolicy()` is the self-confirm tier: the person at the agent confirms through the
    framework's resume (or a reviewer the directory lists decides). A policy that names
    `approvers`, or says `any_reviewer=True`, is the four-eyes tier: only an authenticated
    reviewer decides.

    Attributes:
        allowed: the decisions a reviewer may give.
        approvers: reviewer ids or `group:<name>` (normalised as `identity.approver`; groups
            are the reviewer directory's); empty: see `any_reviewer`.
        any_reviewer: with no approvers named, any reviewer the directory lists decides, and
            nobody self-confirms (four-eyes); False (the default) with no approvers named is
            the self-confirm tier.
        quorum: distinct approving reviewers needed; one reject denies. With a quorum above 1
            only approve and reject are possible (an edit or an answer needs one owner), and
            the policy must name approvers or admit any reviewer (self-confirmation is one
            person).
        allow_self_approval: whether the requester may decide its own request.
        expires_in: after this the request is denied by default; None never expires.
        description: shown to reviewers.
        headline: argument fields reviewers see first and large (an amount, an address).
        sensitive: argument fields reviewers see only after one more click (each viewing is
            journaled); notifications never carry them.
        irreversible: the tool's effect cannot be undone: reviewers confirm an approval.
        args_schema: the JSON Schema (2020-12) of the tool's arguments, as the adapter
            captured it from the tool: the inbox builds its edit form from it, and an edit
            that does not conform is refused before anything is recorded.
    """

    allowed: frozenset[DecisionKind] = frozenset(DecisionKind)
    approvers: frozenset[str] = frozenset()
    quorum: int = 1
    allow_self_approval: bool = False
    expires_in: timedelta | None = timedelta(hours=24)
    description: str = ""
    any_reviewer: bool = False
    headline: tuple[str, ...] = ()
    sensitive: frozenset[str] = frozenset()
    irreversible: bool = False
    args_schema: Mapping[str, Any] | None = field(default=None, hash=False)

    def __post_init__(self) -> None:
        if self.quorum < 1:
            raise InvalidApprovalRequest(f"quorum must be at least 1, not {self.quorum}")
        if not self.allowed:
            raise InvalidApprovalRequest("a policy must allow at least one decision")
        if isinstance(self.approvers, str):  # a set of names, not the letters of one
            raise InvalidApprovalRequest("approvers must be a set of ids, not one string")
        if not isinstance(self.any_reviewer, bool):
            raise InvalidApprovalRequest("any_reviewer is True or False")
        object.__setattr__(self, "approvers", frozenset(approver(a) for a in self.approvers))
        object.__setattr__(self, "headline", field_names(self.headline, "headline"))
        object.__setattr__(self, "sensitive", frozenset(field_names(self.sensitive, "sensitive")))
        if not isinstance(self.irreversible, bool):
            raise InvalidApprovalRequest("irreversible is True or False")
        if self.args_schema is not None:
            object.__setattr__(self, "args_schema", args_schema(self.args_schema))
        if self.any_reviewer and self.approvers:
            raise InvalidApprovalRequest(
                "any_reviewer=True admits every reviewer the directory lists, approvers name "
                "some: give one of them"
            )
        if self.quorum > 1 and self.tier is ApprovalTier.SELF_CONFIRM:
            raise InvalidApprovalRequest(
                f"a quorum of {self.quorum} needs reviewers: name approvers or say "
                "any_reviewer=True (a self-confirmation is one person)"
            )

    @property
    def tier(self) -> ApprovalTier:
        """Self-confirm unless approvers are named or any reviewer is admitted."""
        if self.approvers or self.any_reviewer:
            return ApprovalTier.FOUR_EYES
        return ApprovalTier.SELF_CONFIRM

    @property
    def names_groups(self) -> bool:
        """Whether some approver is a group (whose members the directory says)."""
        return any(a.startswith(GROUP_PREFIX) for a in self.approvers)

    def to_json(self) -> dict[str, Any]:
        """The policy as a request stores it; `tier` is written out for the database (which
        lets a self-confirmation through only on `self_confirm`) and for auditors."""
        return {
            "tier": str(self.tier),
            "allowed": sorted(self.allowed),
            "approvers": sorted(self.approvers),
            "any_reviewer": self.any_reviewer,
            "quorum": self.quorum,
            "allow_self_approval": self.allow_self_approval,
            "expires_in_seconds": None if self.expires_in is None else _seconds(self.expires_in),
            "description": self.description,
        } | self._presentation_json()

    def _presentation_json(self) -> dict[str, Any]:
        """The reviewers' hints, only those set: a policy without them is stored as before."""
        data: dict[str, Any] = {}
        if self.headline:
            data["headline"] = list(self.headline)
        if self.sensitive:
            data["sensitive"] = sorted(self.sensitive)
        if self.irreversible:
            data["irreversible"] = True
        if self.args_schema is not None:
            data["args_schema"] = dict(self.args_schema)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ApprovalPolicy:
        """Raises:
        InvalidApprovalRequest (a ValueError): malformed, or its `tier` is not the one its
            approvers and `any_reviewer` make."""
        seconds = data.get("expires_in_seconds")
        policy = cls(
            allowed=frozenset(DecisionKind(k) for k in data["allowed"]),
            approvers=frozenset(data["approvers"]),
            quorum=int(data["quorum"]),
            allow_self_approval=bool(data["allow_self_approval"]),
            expires_in=None if seconds is None else timedelta(seconds=seconds),
            description=str(data.get("description", "")),
            any_reviewer=data.get("any_reviewer", False),
        )
        if data.get("tier", policy.tier) != policy.tier:
            raise InvalidApprovalRequest(
                f"a policy that says tier {data['tier']!r} is {policy.tier}"
            )
        for name, value in _stored_hints(data).items():
            object.__setattr__(policy, name, value)
        return policy


def _stored_hints(data: Mapping[str, Any]) -> dict[str, Any]:
    """The reviewers' hints of a stored policy that the library would have taken. One it
    would refuse was written behind its back (a worker calling the database's function):
    left out, so that one planted row cannot break every reviewer's listing. The schema is
    judged fully when asked for and before an edit, not on every read (`args_schema`)."""
    hints: dict[str, Any] = {}
    with suppress(InvalidApprovalRequest, TypeError):
        hints["headline"] = field_names(data.get("headline", ()), "headline")
    with suppress(InvalidApprovalRequest, TypeError):
        hints["sensitive"] = frozenset(field_names(data.get("sensitive", ()), "sensitive"))
    if isinstance(irreversible := data.get("irreversible", False), bool):
        hints["irreversible"] = irreversible
    if (schema := data.get("args_schema")) is not None:
        with suppress(InvalidApprovalRequest):
            hints["args_schema"] = args_schema(schema, read_back=True)
    return hints


@dataclass(frozen=True)
class Decision:
    """A reviewer's decision. `args` for edit, `message` for respond, `reason` for reject."""

    kind: DecisionKind
    reason: str | None = None
    args: dict[str, Any] | None = None
    message: str | None = None

    @classmethod
    def approve(cls) -> Decision:
        return cls(DecisionKind.APPROVE)

    @classmethod
    def reject(cls, reason: str | None = None) -> Decision:
        return cls(DecisionKind.REJECT, reason=reason)

    @classmethod
    def edit(cls, args: dict[str, Any]) -> Decision:
        return cls(DecisionKind.EDIT, args=args)

    @classmethod
    def respond(cls, message: str) -> Decision:
        return cls(DecisionKind.RESPOND, message=message)


_REVIEW_FIELDS = (
    "reason_sealed", "args_digest", "args_sealed", "message_sealed", "grant_id",
)  # fmt: skip


@dataclass(frozen=True)
class Review:
    """One reviewer's decision on an approval, as its `approval.decided` event records it.

    Attributes:
        reviewer: who decided (a reviewer id; any text a name may be, commas included).
        decision: what they decided.
        at: when.
        reason_sealed: the reviewer's reason (a reject's, or any decision's), sealed (the store
            opens it: `ApprovalStore.reason_of`); a reason is never recorded in clear.
        args_digest, args_sealed: an edit's arguments (keyed digest, and sealed base64
            ciphertext).
        message_sealed: a respond's answer, sealed.
        grant_id: the sticky grant that approved it, when no person decided this request.
        groups: the reviewer's groups the decision was made with (signed with it).
        signature: the reviewer side's signature (`ledger.keys.attest`): {key_id, signature}.
        grant: for a grant's approval, the signed grant (its terms and signature).
        self_confirmed: for a self-confirmation (the self-confirm tier), who confirmed it
            (`SelfConfirmation.to_json`); `reviewer` is then its `name`, never a reviewer id.
    """

    reviewer: str
    decision: DecisionKind
    at: datetime
    args_digest: str | None = None
    args_sealed: str | None = None
    message_sealed: str | None = None
    grant_id: str | None = None
    reason_sealed: str | None = None
    groups: tuple[str, ...] = ()
    signature: dict[str, str] | None = None
    grant: dict[str, Any] | None = None
    self_confirmed: dict[str, Any] | None = None

    @property
    def confirmation(self) -> SelfConfirmation | None:
        """Who self-confirmed it; None for a reviewer's decision or a grant's."""
        return (
            None if self.self_confirmed is None else SelfConfirmation.from_json(self.self_confirmed)
        )

    def to_json(self, *, sealed: bool = True) -> dict[str, Any]:
        """The review as event and row JSON (absent fields left out); without `sealed`, no
        ciphertexts (for display)."""
        data: dict[str, Any] = {
            "reviewer": self.reviewer,
            "decision": str(self.decision),
            "at": self.at.isoformat(),
        }
        for name in _REVIEW_FIELDS:
            value = getattr(self, name)
            if value is not None and (sealed or not name.endswith("_sealed")):
                data[name] = value
        data["groups"] = list(self.groups)
        for name in ("signature", "grant", "self_confirmed"):
            if (value := getattr(self, name)) is not None:
                data[name] = value
        return data

    def payload(self) -> dict[str, Any]:
        """What the decision carries besides its kind, as its signature covers it."""
        return {n: v for n in _REVIEW_FIELDS if (v := getattr(self, n)) is not None}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Review:
        """A review from `to_json`'s JSON, or from an `approval.decided` event's data (whose
        `final` and `decided_by` describe the approval, not the review)."""
        return cls(
            reviewer=data["reviewer"],
            decision=DecisionKind(data["decision"]),
            at=datetime.fromisoformat(data["at"]),
            args_digest=data.get("args_digest"),
            args_sealed=data.get("args_sealed"),
            message_sealed=data.get("message_sealed"),
            grant_id=data.get("grant_id"),
            reason_sealed=data.get("reason_sealed"),
            groups=tuple(data["groups"]),
            signature=data.get("signature"),
            grant=data.get("grant"),
            self_confirmed=data.get("self_confirmed"),
        )


@dataclass(frozen=True)
class Approval:
    """An approval as the store knows it (the `approvals` projection)."""

    approval_id: str
    run_id: str
    thread_id: str | None
    tool: str
    kind: str
    call_id: str
    args_digest: str
    binding: str
    requested_by: str
    policy: ApprovalPolicy
    status: ApprovalStatus
    requested_at: datetime
    expires_at: datetime | None
    decided_by: tuple[str, ...] = ()
    """Who made it final: every approving reviewer of an approval, the one reviewer of any
    other decision, whoever expired or cancelled it; empty while pending."""
    decided_at: datetime | None = None
    consumed_by: str | None = None
    consumed_at: datetime | None = None
    reviews: tuple[Review, ...] = ()
    thread_config: dict[str, Any] | None = None
    version: int = 0
    args: dict[str, Any] | None = field(default=None, compare=False)
    decision: Decision | None = field(default=None, compare=False)
    context: RequestContext | None = field(default=None, compare=False)
    """What led to the call (`ApprovalStore.get(..., reveal=True)` opens it; empty when the
    adapter captured nothing); None when not revealed."""

    @property
    def consumed(self) -> bool:
        return self.consumed_at is not None

    @property
    def approvers(self) -> tuple[str, ...]:
        """The distinct reviewers who approved so far, in order."""
        return tuple(
            dict.fromkeys(r.reviewer for r in self.reviews if r.decision is DecisionKind.APPROVE)
        )

    @property
    def approved_by(self) -> tuple[str, ...]:
        """Who allowed the tool to run: the deciders of an approval or an edit; else nobody.
        A self-confirmation's is its `SelfConfirmation.name`, never a reviewer id."""
        return self.decided_by if self.status.runs_tool else ()

    @property
    def tier(self) -> ApprovalTier:
        return self.policy.tier

    @property
    def self_confirmed(self) -> SelfConfirmation | None:
        """Who self-confirmed its decision at the agent; None when a reviewer decided it (or
        nobody yet)."""
        last = self.reviews[-1] if self.reviews and self.status.final else None
        return None if last is None else last.confirmation


def json_object(value: Any, what: str, max_bytes: int | None = None) -> str:
    """The canonical JSON of `value`, a JSON object of at most `max_bytes` bytes.

    Raises:
        InvalidApprovalRequest: not a dict, not storable JSON (`ledger.limits`), too big.
    """
    if not isinstance(value, dict):
        raise InvalidApprovalRequest(f"{what} must be a JSON object, not {type(value).__name__}")
    try:
        text = canonical_json(value)
    except ValueError as e:
        raise InvalidApprovalRequest(f"{what} is not JSON: {e}") from e
    if max_bytes is not None and len(text.encode()) > max_bytes:
        raise InvalidApprovalRequest(f"{what} are more than {max_bytes} bytes of JSON")
    return text


def has_float(value: Any) -> bool:
    """Whether a JSON value (checked by `json_object`: at most 64 deep) holds a float."""
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        value = list(value.values())
    return isinstance(value, list | tuple) and any(has_float(v) for v in value)


def identifier(value: Any, what: str) -> str:
    """`value` if it is a usable id or name (`ledger.limits.name_problem`).

    Raises:
        InvalidApprovalRequest: it is not.
    """
    if (problem := name_problem(value)) is not None:
        raise InvalidApprovalRequest(f"{what} {problem}")
    return str(value)


def check_decision(decision: Any) -> None:
    """Check that a decision is well formed before anything is recorded: edited arguments a
    JSON object, an answer and a reason text within `MAX_TEXT_BYTES`. Whether the policy allows
    it is the store's business.

    Raises:
        InvalidApprovalRequest: it is not.
    """
    if not isinstance(decision, Decision) or not isinstance(decision.kind, DecisionKind):
        raise InvalidApprovalRequest(f"not a Decision: {type(decision).__name__}")
    if decision.kind is DecisionKind.EDIT:
        json_object(decision.args, "edited args", MAX_ARGS_BYTES)
    if decision.kind is DecisionKind.RESPOND:
        _check_text(identifier(decision.message, "a response"), "a response")
    if decision.reason is not None:
        if not isinstance(decision.reason, str):
            raise InvalidApprovalRequest("a reason must be text")
        _check_text(decision.reason, "a reason")


def _check_text(text: str, what: str) -> None:
    if (problem := text_problem(text)) is not None:
        raise InvalidApprovalRequest(f"{what} {problem}")
    if len(text.encode()) > MAX_TEXT_BYTES:
        raise InvalidApprovalRequest(f"{what} is longer than {MAX_TEXT_BYTES} bytes")


def args_digest(ring: KeyRing, args: dict[str, Any]) -> str:
    """The keyed digest of a call's arguments under the active value-MAC key, as the tool-call
    ledger writes it (`ledger.keys.digests`)."""
    return value_digest(ring, args)


def binding_of(
    run_id: str, tool: str, kind: str, digest: str, call_id: str, approval_id: str
) -> str:
    """The binding hash: one approval, for this run, tool, kind, arguments and call only."""
    fields = ["signoff.approval.v1", run_id, tool, kind, digest, call_id, approval_id]
    return hashlib.sha256(canonical_json(fields).encode()).hexdigest()


def is_expired(expires_at: datetime | None, now: datetime) -> bool:
    return expires_at is not None and now >= expires_at


def expiry(policy: ApprovalPolicy, requested_at: datetime) -> datetime | None:
    if policy.expires_in is None:
        return None
    try:
        return requested_at + policy.expires_in
    except OverflowError as e:
        raise InvalidApprovalRequest(f"the policy's expiry is out of range: {e}") from e


def _seconds(span: timedelta) -> int | float:
    """A span in seconds, an integer when whole: event data without a float takes the
    canonical encoders' fast path, and RFC 8785 writes 86400.0 as 86400 anyway."""
    seconds = span.total_seconds()
    return int(seconds) if seconds.is_integer() else seconds
