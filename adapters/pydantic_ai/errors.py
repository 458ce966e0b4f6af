"""Why a Pydantic AI run is not resumed (or not paused): each fails closed, with nothing applied."""

from __future__ import annotations

from ledger.errors import SignoffError

__all__ = [
    "ApprovalsPending",
    "DuplicateToolCallId",
    "ResumeRefused",
    "UnboundResult",
    "UngovernedRun",
    "UnsupportedDeferral",
    "UnsupportedNativeTool",
]


class ResumeRefused(SignoffError):
    """A paused run that cannot be resumed as its state says: no tool call result is applied and
    the model is not called."""

    def __init__(self, pause_id: str, why: str) -> None:
        super().__init__(f"paused run {pause_id} not resumed: {why}")
        self.pause_id = pause_id
        self.why = why


class DuplicateToolCallId(ResumeRefused):
    """One model response repeats a tool call id: a result could bind to either call."""


class UnboundResult(ResumeRefused):
    """A result (or approval) for a call the paused requests do not hold, under another
    category than the one the call waits in, or an approval the store does not hold for this
    run, call and tool."""


class ApprovalsPending(ResumeRefused):
    """An approval of the paused run has no final decision yet (and its time is not up): decide
    it first. The pause is released, so a resume after the decision takes it at once."""


class UnsupportedDeferral(SignoffError):
    """The run deferred calls Signoff does not answer (external tools, `CallDeferred`
    questions), or asked for an approval Signoff did not ask for."""


class UnsupportedNativeTool(SignoffError, TypeError):
    """The agent (or the run) has native tools: the model provider runs them (code execution,
    web fetch or search, `MCPServerTool`...) and they never reach the toolset Signoff wraps.
    Refused before the model is asked anything; nothing ran."""

    def __init__(self, kinds: list[str]) -> None:
        super().__init__(
            f"native tools {kinds} run at the model provider, outside Signoff's ledger; give "
            "the agent function tools (or a capability's local tool, `native=False`) instead"
        )
        self.kinds = kinds


class UngovernedRun(SignoffError):
    """A governed toolset was called outside `Signoff.run` / `Signoff.resume`, or a call came
    approved by something other than Signoff's store."""
