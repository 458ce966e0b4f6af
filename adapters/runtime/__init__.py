"""The runtime every adapter shares (LangGraph, Dex, Welt, the MCP gateway, the OpenAI Agents
SDK, Pydantic AI): one tool spec, the policy decision, the ids, the
`ask -> wait -> gate -> execute` flow and the idempotent decide rule. It imports no agent
framework, only the ledger and approvals, so each adapter is wiring around these functions.

```
judge(point, spec, call, principal)       -> Verdict: allow, deny or approval (policy.py)
governed(spec, verdict)                   -> the spec with the approval the verdict requires
ask(store, spec, call, requested_by)      -> Approval (the same request returns the same one)
ready(approval) / await_final(store, id, s) -> final (or expired) yet?
run(ledger, store, spec, call, fn, id)    -> CallOutcome (approval consumed in the intent; a
                                             verdict's denial recorded, its stamp with it)
decide_once(store, id, decision, who)     -> DecisionRecord(duplicate, approval) | DecisionConflict
confirm_once(store, id, decision)         -> the same, self-confirmed by this process
```

Beside them: `hitl` reads HumanInTheLoopMiddleware decisions (LangGraph resumes, the HTTP
service's decide bodies) and says which decisions a policy leaves a reviewer; `documents` is
an approval's JSON (the CLI's, the HTTP service's).
"""

from .decide import DecisionConflict, DecisionRecord, confirm_once, decide_once, same_decision
from .flow import ask, await_final, ready, require_ready, run
from .policy import DATABASE_SETS, PolicyChoice, governed, judge, point_of, specs_by_name
from .spec import ToolSpec, effect_of_hints, task_run_id

__all__ = [
    "DATABASE_SETS",
    "DecisionConflict",
    "DecisionRecord",
    "PolicyChoice",
    "ToolSpec",
    "ask",
    "await_final",
    "confirm_once",
    "decide_once",
    "effect_of_hints",
    "governed",
    "judge",
    "point_of",
    "ready",
    "require_ready",
    "run",
    "same_decision",
    "specs_by_name",
    "task_run_id",
]
