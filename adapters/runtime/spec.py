"""How Signoff treats one tool, and the ids built from a call."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from approvals import ApprovalPolicy
from ledger.calls.model import Effect, ToolPolicy

__all__ = ["ToolSpec", "effect_of_hints", "task_run_id"]


@dataclass(frozen=True)
class ToolSpec:
    """How Signoff treats one tool, whatever framework calls it.

    Attributes:
        name: the tool's name, as the model calls it.
        effect: read and idempotent_write run up to three attempts, anything else once (a
            write whose outcome is not recorded becomes `outcome_unknown`). None: the adapter
            may infer it (LangGraph reads MCP annotations), else single_attempt.
        approval: the approval policy (allowed decisions, approvers, quorum, expiry); None runs
            the tool without asking.
        once_per_run: run at most once per run, whatever the call id.
        description: shown to reviewers.
    """

    name: str
    effect: Effect | None = None
    approval: ApprovalPolicy | None = None
    once_per_run: bool = False
    description: str = ""

    def ledger_policy(self) -> ToolPolicy:
        """What the tool-call ledger needs of this spec."""
        return ToolPolicy(self.effect or Effect.SINGLE_ATTEMPT, self.once_per_run)


def task_run_id(run_id: str, call_id: str) -> str:
    """Who consumes the approval of a call: `<run>/<call id>`, one per call of a run."""
    return f"{run_id}/{call_id}"


def effect_of_hints(hints: Mapping[str, Any]) -> Effect:
    """The effect MCP tool annotations claim: `readOnlyHint` -> read, `idempotentHint` ->
    idempotent_write, else single-attempt (hints, so only what the server claims)."""
    if hints.get("readOnlyHint") is True:
        return Effect.READ
    if hints.get("idempotentHint") is True:
        return Effect.IDEMPOTENT_WRITE
    return Effect.SINGLE_ATTEMPT
