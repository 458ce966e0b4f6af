"""Errors of the OpenAI Agents SDK adapter. Each means nothing was applied and nothing ran."""

from __future__ import annotations

from agents.exceptions import AgentsException

from ledger.errors import SignoffError

__all__ = ["AmbiguousRunState", "ApprovalsPending", "NotApprovedInSignoff", "UnsupportedTool"]


class UnsupportedTool(SignoffError, TypeError):
    """A tool or handoff of the agent that Signoff cannot put through its ledger (a hosted or
    MCP tool, an agent's MCP servers, an agent as a tool (`Agent.as_tool`), a `Handoff`
    object): refused when the agent is wrapped, before anything runs."""


class AmbiguousRunState(SignoffError):
    """A paused run's state that does not say unambiguously which calls were approved: an
    approval item for an unknown agent or tool, a call id used twice, an item the SDK drops on
    restore, or one without its own approval for exactly that run, tool, call id and arguments
    in the store (another run's, missing). The resume fails closed: no decision is applied and
    the pause is released, for the next resume (a worker whose code knows the state)."""

    def __init__(self, pause_id: str, problem: str) -> None:
        super().__init__(f"paused run {pause_id} cannot be resumed: {problem}; nothing ran")
        self.pause_id = pause_id
        self.problem = problem


class ApprovalsPending(SignoffError):
    """A paused run was resumed before every approval it waits on was decided (or expired).
    Nothing was applied; the pause is released, so a resume after the decision takes it."""

    def __init__(self, pause_id: str, approval_ids: list[str]) -> None:
        super().__init__(
            f"paused run {pause_id} still waits on approval(s) {', '.join(approval_ids)}; "
            "nothing ran"
        )
        self.pause_id = pause_id
        self.approval_ids = approval_ids


class NotApprovedInSignoff(SignoffError, AgentsException):
    """The SDK was told a call is approved (`RunState.approve` on a state Signoff did not
    resume) but the store holds no final decision for it: the call does not run. An SDK
    exception too, so `Runner.run` raises it as it is."""

    def __init__(self, tool: str, call_id: str, approval_id: str) -> None:
        super().__init__(
            f"the call {call_id} to {tool!r} has no decision in Signoff (approval "
            f"{approval_id}); it did not run: approvals are decided in Signoff's store"
        )
        self.tool = tool
        self.call_id = call_id
        self.approval_id = approval_id
