"""Dex adapter: one tool call as a durable Dex Flow whose approval and once-per-run guarantee
live in Signoff's store, so they hold across Workers, restarts and sessions, and auditors see
Dex calls in the same ledger as LangGraph ones.

Workers: `ToolCallFlow(SignoffDex.of(store, ledger, DexTool(ToolSpec(...), fn), ...))` in a
`Registry([...], allow_async_handlers=True)` served by an `AsyncWorker`. Clients: the same Flow
(runtime optional), `AsyncClient.start_flow(flow, flow_id, ToolCallRequest(...))`, and
`decide_approval(...)` for reviewers.
"""

# ruff: noqa: E402  (the extra is checked before anything imports dex)

from adapters.extras import DEX, require_extra

require_extra("adapters.dex", "dex", DEX)

from adapters.runtime import ToolSpec

from .client import decide_approval
from .errors import ApprovalNotForThisCall, DecisionConflict, RuntimeNotBound
from .flow import (
    DECIDE_RPC,
    DECISIONS,
    DEFAULT_RECHECK,
    AwaitToolApproval,
    CallTool,
    SettleToolCall,
    StartToolCall,
    ToolCallFlow,
    call_step_options,
    retry_policy,
)
from .logic import (
    ApprovalWait,
    DecisionRecord,
    DexTool,
    SignoffDex,
    await_approval,
    call_tool,
    decide_for_flow,
    judge_call,
    record_decision,
    task_run_id,
)
from .values import (
    ApprovalSignal,
    DecideRequest,
    DecideResult,
    ToolCallRequest,
    ToolCallResult,
    channel_key,
)

__all__ = [
    "DECIDE_RPC",
    "DECISIONS",
    "DEFAULT_RECHECK",
    "ApprovalNotForThisCall",
    "ApprovalSignal",
    "ApprovalWait",
    "AwaitToolApproval",
    "CallTool",
    "DecideRequest",
    "DecideResult",
    "DecisionConflict",
    "DecisionRecord",
    "DexTool",
    "RuntimeNotBound",
    "SettleToolCall",
    "SignoffDex",
    "StartToolCall",
    "ToolCallFlow",
    "ToolCallRequest",
    "ToolCallResult",
    "ToolSpec",
    "await_approval",
    "call_step_options",
    "call_tool",
    "channel_key",
    "decide_approval",
    "decide_for_flow",
    "judge_call",
    "record_decision",
    "retry_policy",
    "task_run_id",
]
