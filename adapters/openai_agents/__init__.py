"""OpenAI Agents SDK adapter: every function tool call of an agent through Signoff's ledger and
policy, approvals requested in Signoff's store, and the paused `RunState` kept server-side,
sealed, resumed once by any worker with the store's decisions (`runs`, `tools`)."""

# ruff: noqa: E402  (the extra is checked before anything imports the SDK)

from adapters.extras import OPENAI_AGENTS, require_extra

require_extra("adapters.openai_agents", "openai-agents", OPENAI_AGENTS)

from adapters.runtime import ToolSpec

from .errors import AmbiguousRunState, ApprovalsPending, NotApprovedInSignoff, UnsupportedTool
from .runs import DATABASE_SETS, FRAMEWORK, Finished, Paused, SignoffAgents

__all__ = [
    "DATABASE_SETS",
    "FRAMEWORK",
    "AmbiguousRunState",
    "ApprovalsPending",
    "Finished",
    "NotApprovedInSignoff",
    "Paused",
    "SignoffAgents",
    "ToolSpec",
    "UnsupportedTool",
]
