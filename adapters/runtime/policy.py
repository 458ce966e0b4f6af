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

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from approvals.policies import (
    CallFacts,
    Outcome,
    PolicyPoint,
    Principal,
    RegisteredTool,
    Verdict,
    own_rule,
)
from ledger.calls.model import Effect, ToolCall

from .spec import ToolSpec

__all__ = ["governed", "judge"]


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
