"""`signoff demo`: a scripted support agent (no API key) whose refund a person approves, run
across OS processes on one Signoff database. `flow` is the command's side, `review` its reviewer
(the HTTP service and a token), `worker` the agent's processes, `agent` the agent itself."""

# ruff: noqa: E402  (the extra is checked before anything imports LangGraph)

# With no database URL the demo starts the embedded server, which says itself when its extra is
# missing; with a URL it needs LangGraph, and the HTTP service and a client to decide through it.
from adapters.extras import LANGGRAPH, SERVE, require_extra

require_extra("signoff demo", "demo", (*LANGGRAPH, *SERVE, "httpx"))

from .flow import DemoFailed, run_demo

__all__ = ["DemoFailed", "run_demo"]
