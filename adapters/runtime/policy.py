"""The policy decision of one call, for every adapter: `judge` asks the policy decision point
(or, without one, the tool's own rule), `governed` is the spec the verdict leaves (its approval
policy, or none), and `flow.ask` / `flow.run` record the verdict's stamp with the approval
request and the call's intent.

A call is judged when it is first asked and again when it resumes: a request keeps the set
version it was judged under (and its approval policy), and the intent records the judgment it
ran under. A set published in between that denies the call denies it, approved or not; one
that allows it outright runs it, honouring a decision already made (a reject still denies it,
an edit or an answer is used) and not waiting for a request still pending.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any, Literal

from approvals.policies import (
    CallFacts,
    Outcome,
    PolicyPoint,
    PolicySets,
    Principal,
    RegisteredTool,
    Verdict,
    own_rule,
)
from ledger.calls.model import Effect, ToolCall
from ledger.calls.service import ToolLedger

from .spec import ToolSpec

__all__ = ["DATABASE_SETS", "PolicyChoice", "governed", "judge", "point_of", "specs_by_name"]

DATABASE_SETS: Literal["database"] = "database"
"""An adapter's `policy` default: a policy decision point over the published policy sets of the
ledger's database, built and closed by the adapter (with no set published, or a set of mode
off, each tool's spec decides)."""

PolicyChoice = PolicyPoint | Literal["database"] | None
"""How an adapter judges calls: a point it is given (its owner closes it), `DATABASE_SETS`, or
None (each tool's spec alone, whatever is published)."""


def point_of(
    choice: PolicyChoice, ledger: ToolLedger
) -> tuple[PolicyPoint | None, PolicyPoint | None]:
    """The point calls are judged by under `choice`, and the one built here for it (which the
    adapter closes when it closes; None when it was given one or none)."""
    if choice == DATABASE_SETS:
        built = PolicyPoint(PolicySets(ledger.db, ledger.ring))
        return built, built
    return (choice if isinstance(choice, PolicyPoint) else None), None


def specs_by_name(specs: Iterable[ToolSpec]) -> dict[str, ToolSpec]:
    """The specs by their tool's name.

    Raises:
        ValueError: two specs name one tool.
    """
    by_name: dict[str, ToolSpec] = {}
    for spec in specs:
        if spec.name in by_name:
            raise ValueError(f"tool names must be unique: {spec.name!r} is named twice")
        by_name[spec.name] = spec
    return by_name


async def judge(
    point: PolicyPoint | None,
    spec: ToolSpec,
    call: ToolCall,
    principal: Principal | str,
    *,
    args_schema: Mapping[str, Any] | None = None,
) -> Verdict:
    """The verdict on `call` of the active policy set (`point`), or of `spec`'s own rule when
    there is no point, no set, or a set of mode off. `args_schema` (the tool's arguments' JSON
    Schema, as the adapter knows it) registers the tool, once per process, for the sets
    published next to be validated against.

    Raises:
        DatabaseUnavailable: the database cannot be reached.
    """
    if point is None:
        return own_rule(spec.approval)
    effect = spec.effect or Effect.SINGLE_ATTEMPT
    if args_schema is not None:
        await point.register(RegisteredTool(spec.name, effect, args_schema))
    who = Principal(principal) if isinstance(principal, str) else principal
    facts = CallFacts(call.run_id, call.call_id, call.tool, call.args, who, effect)
    return await point.judge(facts, spec.approval)


def governed(spec: ToolSpec, verdict: Verdict) -> ToolSpec:
    """`spec` with the approval the verdict requires (none when it allows or denies)."""
    approval = verdict.approval if verdict.outcome is Outcome.APPROVAL else None
    return spec if approval == spec.approval else replace(spec, approval=approval)
