"""`signoff demo`: a scripted support agent (no API key) whose refund a person approves, run
across OS processes on one Signoff database. `flow` is the command's side, `worker` the agent's
processes, `agent` the agent itself."""

from .flow import DemoFailed, run_demo

__all__ = ["DemoFailed", "run_demo"]
