"""Pydantic AI agents through Signoff: every tool call judged, asked for and run through the
ledger; a run that waits for approvals paused server-side and resumed, once, in any process.

```
signoff = Signoff(ledger, store, PausedRuns(db, ring), specs=[ToolSpec("refund", ...)])
ended = await signoff.run(agent, "Refund order A7", run_id="r1", requested_by="ann")
ended.pause_id            # waiting for reviewers: keep only this id
ended = await signoff.resume(agent, ended.pause_id)   # any process, once decided
```

`runs` (Signoff, SignoffRun), `toolset` (the wrapper every call goes through), `errors`.
"""

# ruff: noqa: E402  (the extra is checked before anything imports Pydantic AI)

from adapters.extras import PYDANTIC_AI, require_extra

require_extra("adapters.pydantic_ai", "pydantic-ai", PYDANTIC_AI)

from adapters.runtime import ToolSpec
from ledger.pauses import PausedRuns, PauseTaken, UnknownPause

from .errors import (
    ApprovalsPending,
    DuplicateToolCallId,
    ResumeRefused,
    UnboundResult,
    UngovernedRun,
    UnsupportedDeferral,
    UnsupportedNativeTool,
)
from .runs import DATABASE_SETS, FRAMEWORK, Signoff, SignoffRun
from .toolset import APPROVAL_KEY, SignoffToolset

__all__ = [
    "APPROVAL_KEY",
    "DATABASE_SETS",
    "FRAMEWORK",
    "ApprovalsPending",
    "DuplicateToolCallId",
    "PauseTaken",
    "PausedRuns",
    "ResumeRefused",
    "Signoff",
    "SignoffRun",
    "SignoffToolset",
    "ToolSpec",
    "UnboundResult",
    "UngovernedRun",
    "UnknownPause",
    "UnsupportedDeferral",
    "UnsupportedNativeTool",
]
