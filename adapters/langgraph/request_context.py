"""What a LangGraph agent's approval request carries for reviewers besides the call: what led
to it (the model's text beside the tool call, the user's last message) and the tool's argument
schema, for the inbox's edit form and the check of edits.

Nothing here fails a call: a conversation is cut to what reviewers read
(`RequestContext.captured`), and a schema the policy cannot carry is left out with a warning.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import BaseTool

from approvals import ApprovalPolicy, InvalidApprovalRequest, RequestContext
from ledger.log import get_logger

__all__ = ["request_context", "tool_args_schema", "with_args_schema"]

log = get_logger(__name__)


def request_context(messages: Sequence[Any], tool_call_id: str) -> RequestContext | None:
    """What led to the call `tool_call_id`: the text of the model message that asked for it
    (its stated reason) and the last human message before that one; None when neither says
    anything."""
    asked = None
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, AIMessage) and any(
            c.get("id") == tool_call_id for c in message.tool_calls
        ):
            asked = index
            break
    if asked is None:
        return None
    user = next(
        (m for m in reversed(messages[:asked]) if isinstance(m, HumanMessage)),
        None,
    )
    return RequestContext.captured(_text(messages[asked]), None if user is None else _text(user))


def tool_args_schema(tool: BaseTool) -> dict[str, Any] | None:
    """The JSON Schema of the arguments the model gives `tool` (its `tool_call_schema`:
    without injected arguments); None when the tool has none that can be read."""
    try:
        schema: Any = tool.tool_call_schema
        if isinstance(schema, Mapping):
            return dict(schema)
        if hasattr(schema, "model_json_schema"):  # pydantic 2
            return dict(schema.model_json_schema())
        if hasattr(schema, "schema"):  # pydantic 1 models
            return dict(schema.schema())
    except Exception as e:  # a tool's schema is its author's code: never fail the call for it
        log.warning("tool schema unreadable", tool=tool.name, error=type(e).__name__)
    return None


def with_args_schema(policy: ApprovalPolicy, tool: BaseTool | None) -> ApprovalPolicy:
    """`policy` with the tool's argument schema, when it has none of its own and the tool has
    one the policy can carry (`approvals.presentation.args_schema`); else `policy` as it is
    (a refused schema is logged, never its content)."""
    if policy.args_schema is not None or tool is None:
        return policy
    schema = tool_args_schema(tool)
    if schema is None:
        return policy
    try:
        return replace(policy, args_schema=schema)
    except InvalidApprovalRequest as e:
        problem = str(e).split(":", 1)[0]  # the kind of problem, not the schema's text
        log.warning("tool schema not stored with its approvals", tool=tool.name, problem=problem)
        return policy


def _text(message: BaseMessage) -> str:
    return str(message.text)
