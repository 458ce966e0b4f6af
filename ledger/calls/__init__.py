"""The once-per-run tool-call ledger: the call model (`model`), its fold and row mapping
(`projection`), the recorder that appends a call's events and writes its row (`records`, SQL in
`_sql`), `ToolLedger`, the service adapters run every tool call through (`service`), and the
checks `ledger verify` runs over call streams (`resolution`, `bindings`)."""

from .history import Judgment, RunHistory, ToolTally, run_history
from .model import (
    CallContext,
    CallOutcome,
    CallRecord,
    CallStatus,
    Effect,
    GateDeny,
    GateRespond,
    GateRun,
    ToolCall,
    ToolFailed,
    ToolPolicy,
    call_stream,
)
from .service import DEFAULT_LEASE_SECONDS, MAX_LEASE_SECONDS, Gate, ToolFunction, ToolLedger

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "MAX_LEASE_SECONDS",
    "CallContext",
    "CallOutcome",
    "CallRecord",
    "CallStatus",
    "Effect",
    "Gate",
    "GateDeny",
    "GateRespond",
    "GateRun",
    "Judgment",
    "RunHistory",
    "ToolCall",
    "ToolFailed",
    "ToolFunction",
    "ToolLedger",
    "ToolPolicy",
    "ToolTally",
    "call_stream",
    "run_history",
]
