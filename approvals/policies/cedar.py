"""Cedar's permit and forbid as three outcomes, for one parsed policy set.

- A satisfied `forbid` denies (Cedar: forbid overrides permit); its `@reason("...")` is the
  reason the model sees.
- A satisfied `permit` allows; one annotated `@approval` requires an approval instead, with the
  policy its annotations give: `@approvers("alice, group:support-lead")` or `@any_reviewer`,
  `@quorum("2")`, `@expires("3600")` (seconds; `"never"`), `@decisions("approve, reject")`,
  `@self_approval("true")`, and `@approval("...")` itself is the description reviewers see.
  Fields it does not give come from the tool's own approval policy. When several apply, an
  approval wins over a plain allow, and of several approval permits the first in the set's text
  decides; every determining policy is recorded.
- Nothing satisfied: denied (default deny). An evaluation error in any policy denies the call:
  Cedar would skip the policy, Signoff fails closed.

Every policy carries an `@id("...")`, unique in its set: that is the id recorded with calls.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import cedarpy

from ..errors import InvalidApprovalRequest
from ..model import ApprovalPolicy, DecisionKind
from .model import Outcome

__all__ = ["Decided", "Rule", "Rules", "evaluate", "parse_rules"]

_APPROVAL_KEYS = (
    "approval",
    "approvers",
    "any_reviewer",
    "quorum",
    "expires",
    "decisions",
    "self_approval",
)
_INTERNAL_ID = re.compile(r"policy\d+")


@dataclass(frozen=True)
class Rule:
    """One policy of a set: its `@id`, its effect and what Signoff reads of its annotations."""

    id: str
    forbid: bool
    approval: Mapping[str, str] | None  # the approval annotations of an `@approval` permit
    reason: str

    def approval_policy(self, base: ApprovalPolicy | None) -> ApprovalPolicy:
        """The approval this permit requires, over the tool's own policy (`base`).

        Raises:
            InvalidApprovalRequest: the annotations make no valid policy.
        """
        notes = self.approval or {}
        policy = base or ApprovalPolicy()
        changes: dict[str, Any] = {}
        if notes.get("approval"):
            changes["description"] = notes["approval"]
        if "approvers" in notes:
            names = [a.strip() for a in notes["approvers"].split(",") if a.strip()]
            changes["approvers"] = frozenset(names)
            changes["any_reviewer"] = False
        if "any_reviewer" in notes:
            changes["any_reviewer"] = True
            changes["approvers"] = frozenset()
        if "quorum" in notes:
            changes["quorum"] = _integer(notes["quorum"], "quorum")
        if "expires" in notes:
            text = notes["expires"].strip()
            changes["expires_in"] = (
                None if text == "never" else timedelta(seconds=_integer(text, "expires"))
            )
        if "decisions" in notes:
            try:
                kinds = [DecisionKind(d.strip()) for d in notes["decisions"].split(",")]
            except ValueError as e:
                raise InvalidApprovalRequest(f"@decisions: {e}") from None
            changes["allowed"] = frozenset(kinds)
        if "self_approval" in notes:
            changes["allow_self_approval"] = notes["self_approval"].strip() == "true"
        return replace(policy, **changes)


def _integer(text: str, what: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise InvalidApprovalRequest(f"@{what} is a whole number, not {text!r}") from None


@dataclass(frozen=True)
class Rules:
    """A parsed set: Cedar's handle and each policy by Cedar's internal id, in text order."""

    cedar: cedarpy.PolicySet
    by_internal: Mapping[str, Rule]
    order: tuple[str, ...]  # the `@id`s in the set's text order
    reads_history: bool
    # The tools whose history a policy reads (`context.history.<tool>`); None: the whole
    # history is read some other way. Only these are given to Cedar.
    history_tools: frozenset[str] | None = None
    # The action scopes (Cedar's JSON form) of the policies that read the history: calls of
    # other actions are judged without reading it.
    history_scopes: tuple[Mapping[str, Any], ...] = ()

    def reads_history_of(self, tool: str, group: str) -> bool:
        """Whether a policy that reads the history may apply to a call of `tool`, an action in
        `group` (`Action::"effect:..."`)."""
        return any(_may_apply(scope, tool, group) for scope in self.history_scopes)


def _may_apply(scope: Mapping[str, Any], tool: str, group: str) -> bool:
    """Whether an action scope may match `tool` in `group` (any scope not understood may)."""
    if scope.get("op") == "All":
        return True
    if scope.get("op") == "==":
        entities = [scope.get("entity")]
    elif scope.get("op") == "in":
        entities = scope["entities"] if "entities" in scope else [scope.get("entity")]
    else:
        return True
    for entity in entities:
        if not isinstance(entity, Mapping) or entity.get("type") != "Action":
            return True
        if entity.get("id") == tool or (scope["op"] == "in" and entity.get("id") == group):
            return True
    return False


def parse_rules(text: str) -> tuple[Rules | None, list[str]]:
    """The rules of a policy set's text, or the problems that refuse it (Cedar's parse errors,
    a policy without a unique `@id`, annotations that make no approval policy)."""
    try:
        cedar = cedarpy.PolicySet.from_str(text)
        est = json.loads(cedarpy.policies_to_json_str(text))
    except ValueError as e:
        return None, [str(e)]
    problems: list[str] = []
    if est.get("templates"):
        problems.append("templates are not supported: link them into static policies")
    by_internal: dict[str, Rule] = {}
    seen: set[str] = set()
    scopes: list[Mapping[str, Any]] = []
    statics: Mapping[str, Any] = est.get("staticPolicies", {})
    for internal in sorted(statics, key=_text_order):
        policy = statics[internal]
        notes = {k: str(v or "") for k, v in policy.get("annotations", {}).items()}
        rid = notes.get("id", "")
        if not rid:
            problems.append(f"the policy at position {_text_order(internal)} has no @id")
            continue
        if rid in seen:
            problems.append(f"@id {rid!r} names two policies")
        seen.add(rid)
        forbid = policy["effect"] == "forbid"
        approval = None
        if not forbid and "approval" in notes:
            approval = {k: v for k, v in notes.items() if k in _APPROVAL_KEYS}
        elif any(k in notes for k in _APPROVAL_KEYS if k != "approval") or (
            forbid and "approval" in notes
        ):
            problems.append(f"{rid}: approval annotations belong on a permit with @approval")
        rule = Rule(rid, forbid, approval, notes.get("reason", ""))
        if approval is not None:
            try:
                rule.approval_policy(None if "approvers" in approval else _REVIEWED)
            except InvalidApprovalRequest as e:
                problems.append(f"{rid}: {e}")
        by_internal[internal] = rule
        if '"attr":"history"' in json.dumps(policy, separators=(",", ":")):
            scopes.append(policy.get("action", {"op": "All"}))
    reads_history = '"attr":"history"' in json.dumps(est, separators=(",", ":"))
    order = tuple(r.id for r in by_internal.values())
    history_tools = _history_tools(est) if reads_history else frozenset()
    rules = Rules(cedar, by_internal, order, reads_history, history_tools, tuple(scopes))
    return rules, problems


_HISTORY = {".": {"left": {"Var": "context"}, "attr": "history"}}


def _history_tools(est: Any) -> frozenset[str] | None:
    """The tools whose history the policies of `est` (Cedar's JSON form) read as
    `context.history.<tool>` or test with `has`; None when `context.history` is read whole."""
    tools: set[str] = set()
    whole = False

    def walk(node: Any) -> None:
        nonlocal whole
        if isinstance(node, list):
            for each in node:
                walk(each)
            return
        if not isinstance(node, dict):
            return
        if node == _HISTORY:
            whole = True  # reached only where it is not the left of `.tool` or `has tool`
            return
        for op in (".", "has"):
            inner = node.get(op)
            if isinstance(inner, dict) and inner.get("left") == _HISTORY:
                tools.add(str(inner.get("attr")))
                return
        for value in node.values():
            walk(value)

    walk(est)
    return None if whole else frozenset(tools)


# A base that admits a quorum, to check a set's annotations alone.
_REVIEWED = ApprovalPolicy(any_reviewer=True)


def _text_order(internal: str) -> int:
    return int(internal.removeprefix("policy")) if _INTERNAL_ID.fullmatch(internal) else -1


@dataclass(frozen=True)
class Decided:
    """What the set says of one call: the outcome, the determining policies (by `@id`), why,
    and the approval rule when one is required."""

    outcome: Outcome
    policies: tuple[str, ...]
    reason: str
    approval_rule: Rule | None = None


def evaluate(rules: Rules, request: Mapping[str, Any], entities: cedarpy.Entities) -> Decided:
    """Cedar's answer to `request` as one of three outcomes (see the module's docstring).

    The set was validated against its schema when it was published and the request's context
    is built typed by that schema (`schema.context_of`), so Cedar is not given the schema
    again: checking each request against it would double the cost of a judgment. `entities`
    hold the actions' groups, the principal with its groups and the run."""
    result = cedarpy.is_authorized(dict(request), rules.cedar, entities)
    errors = result.diagnostics.errors
    if errors:
        named = [_INTERNAL_ID.sub(lambda m: _named(rules, m[0]), e) for e in errors]
        return Decided(Outcome.DENY, (), "the policy could not be evaluated: " + "; ".join(named))
    determining = [rules.by_internal[r] for r in result.diagnostics.reasons]
    ids = tuple(r.id for r in determining)
    if result.decision is cedarpy.Decision.Allow:
        approvals = [r for r in determining if r.approval is not None]
        if approvals:
            first = min(approvals, key=lambda r: rules.order.index(r.id))
            why = first.reason or f"policy {first.id} requires an approval"
            return Decided(Outcome.APPROVAL, ids, why, first)
        return Decided(Outcome.ALLOW, ids, f"allowed by {', '.join(ids)}")
    if determining:
        reasons = [r.reason for r in determining if r.reason]
        why = reasons[0] if reasons else f"forbidden by {', '.join(ids)}"
        return Decided(Outcome.DENY, ids, why)
    return Decided(Outcome.DENY, (), "no policy permits this call")


def _named(rules: Rules, internal: str) -> str:
    rule = rules.by_internal.get(internal)
    return rule.id if rule is not None else internal
