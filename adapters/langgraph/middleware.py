"""`SignoffMiddleware`: create_agent's tool calls through Signoff. List it first in
`middleware=[...]`: it must be the outermost tool wrapper, so every call passes through it.

create_agent runs each tool call of a model message as its own task, so each call that needs
approval pauses on its own `interrupt()` (HumanInTheLoopMiddleware's `per_call` shape plus the
approval id); resume each with a decision, a signed token, or nothing (store-decided).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.types import Command, interrupt

from .tools import SignoffTools, call_id_of, turn_of

__all__ = ["SignoffMiddleware"]


def _messages(state: Any) -> list[Any]:
    if isinstance(state, Mapping):
        return list(state.get("messages") or [])
    return list(getattr(state, "messages", []) or [])


class SignoffMiddleware(AgentMiddleware):
    """Approvals from the store and once-per-run tool calls for `create_agent`."""

    def __init__(self, signoff: SignoffTools) -> None:
        super().__init__()
        self.signoff = signoff

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        tool_call = request.tool_call
        config: RunnableConfig = request.runtime.config
        turn, same = turn_of(_messages(request.state), call_id_of(tool_call))
        if len(same) > 1:
            return await self.signoff.refuse_duplicate(tool_call, same, request.tool, config, turn)
        approval = await self.signoff.pending_approval(tool_call, config)
        while approval is not None and not approval.status.final:
            value = interrupt(self.signoff.approval_request(approval, tool_call))
            approval = await self.signoff.apply_resume(approval, value, tool_call, config)

        async def execute(args: dict[str, Any], tool_config: RunnableConfig) -> ToolMessage:
            result = await handler(request.override(tool_call={**tool_call, "args": args}))
            if not isinstance(result, ToolMessage):
                # It ran, and its state update cannot be recorded or replayed: not a certain
                # failure, so a write's outcome is unknown (a read may run again).
                raise RuntimeError(
                    f"{tool_call['name']} returned a Command; tools run through Signoff must "
                    "return a result"
                )
            return result

        return await self.signoff.run(
            tool_call, request.tool, config, execute, approval=approval, turn_id=turn
        )
