"""What a policy decision point decides of one call, and what is recorded of it. No I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ledger.calls.history import Judgment
from ledger.calls.model import Effect
from ledger.errors import SignoffError

from ..model import ApprovalPolicy

__all__ = [
    "ADMIN_GROUP",
    "CallFacts",
    "InvalidPolicySet",
    "Mode",
    "Outcome",
    "PolicyConflict",
    "PolicyError",
    "PolicyNotPermitted",
    "PolicyStamp",
    "Principal",
    "UnknownPolicySet",
    "Verdict",
]

ADMIN_GROUP = "policy-admins"
"""The reviewer directory group whose members may publish policy sets."""


class Outcome(StrEnum):
    ALLOW = "allow"  # runs without asking
    DENY = "deny"  # never runs; the reason is the call's recorded result
    APPROVAL = "approval"  # runs once a reviewer (or the person at the agent) approves


class Mode(StrEnum):
    ENFORCE = "enforce"  # the set decides every call
    LOG_ONLY = "log_only"  # the set's outcome is recorded; the tools' own rules decide
    OFF = "off"  # the tools' own rules decide; nothing is recorded


class PolicyError(SignoffError):
    """Base of the policy errors."""


class InvalidPolicySet(PolicyError, ValueError):
    """A policy set that cannot be published: Cedar's diagnostics (parse or validation against
    the registered tools' schema) or Signoff's rules (an `@id` on every policy, annotations it
    can read). Nothing was written."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("the policy set is refused: " + "; ".join(problems))
        self.problems = problems


class UnknownPolicySet(PolicyError, LookupError):
    """No set of that version was published."""

    def __init__(self, version: int) -> None:
        super().__init__(f"no policy set has version {version}")
        self.version = version


class PolicyConflict(PolicyError):
    """Another policy set was published first (the set was to follow `expected`)."""

    def __init__(self, expected: int, actual: int) -> None:
        super().__init__(
            f"the active policy set is version {actual}, not {expected}: nothing was published"
        )
        self.expected = expected
        self.actual = actual


class PolicyNotPermitted(PolicyError):
    """The publisher is no policy administrator (an active reviewer of `ADMIN_GROUP`)."""

    def __init__(self, who: str) -> None:
        super().__init__(
            f"{who} may not publish policy sets: only reviewers of the directory group "
            f"{ADMIN_GROUP!r} may"
        )
        self.who = who


@dataclass(frozen=True)
class Principal:
    """Who asks for the call: the agent (or requester) and its groups."""

    id: str
    groups: frozenset[str] = frozenset()


@dataclass(frozen=True)
class CallFacts:
    """What a policy judges: the call (its canonical arguments) and who asks for it."""

    run_id: str
    call_id: str
    tool: str
    args: Mapping[str, Any]
    principal: Principal
    effect: Effect = Effect.SINGLE_ATTEMPT


@dataclass(frozen=True)
class PolicyStamp:
    """What is recorded with a call (its `call.started`) and its approval request: the set
    that judged it, what it said and which policies determined that.

    `version` 0 and an empty hash: the set could not even be read (the call was denied)."""

    version: int
    set_hash: str
    mode: Mode
    outcome: Outcome
    policies: tuple[str, ...] = ()
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "set_hash": self.set_hash,
            "mode": str(self.mode),
            "outcome": str(self.outcome),
            "policies": list(self.policies),
            "reason": self.reason,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PolicyStamp:
        return cls(
            version=int(data["version"]),
            set_hash=str(data["set_hash"]),
            mode=Mode(data["mode"]),
            outcome=Outcome(data["outcome"]),
            policies=tuple(str(p) for p in data["policies"]),
            reason=str(data.get("reason", "")),
        )


@dataclass(frozen=True)
class Verdict:
    """What decides one call: its outcome (with the approval's policy when one is needed), why,
    and what is recorded (`stamp`: None when no policy set is active; in log-only mode the
    stamp says what the set would have decided while the tool's own rule decides)."""

    outcome: Outcome
    approval: ApprovalPolicy | None = None
    reason: str = ""
    stamp: PolicyStamp | None = None
    seen: int | None = field(default=None, compare=False)  # the run's calls it counted

    @property
    def judgment(self) -> Judgment | None:
        """What the tool-call ledger records of this verdict in the call's intent."""
        if self.stamp is None:
            return None
        return Judgment(self.stamp.to_json(), self.seen)
