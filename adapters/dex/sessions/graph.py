"""What an agent session needs of its graph and tools, apart from running it: the tools of
the graph's tool nodes, the `SignoffTools` its middleware and tool nodes use, one tool run
for the ledger outside the graph, and the model's text and reasoning as session events."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, AIMessageChunk
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, ToolException
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode
from pydantic import BaseModel, ValidationError

from adapters.langgraph import SignoffMiddleware, SignoffToolNode, SignoffTools
from adapters.langgraph.tools import IDEMPOTENCY_KEY, effect_of, is_content_blocks
from ledger.calls.model import CallContext, ToolFailed

from ..errors import SessionGraphRefused
from .values import SessionEventType

__all__ = [
    "Emit",
    "Graph",
    "emit_deltas",
    "graph_signoffs",
    "invoke_tool",
    "node_tools",
    "same_treatment",
]

Graph = CompiledStateGraph[Any, Any, Any, Any]
Emit = Callable[[SessionEventType, dict[str, Any]], None]


def node_tools(graph: Graph, names: Sequence[str], given: set[str]) -> dict[str, BaseTool]:
    """The tools of the graph's tool nodes by name; two different tools of one name are
    refused unless `given` (the session's own `tools=`) names the one to run."""
    found: dict[str, BaseTool] = {}
    for name in names:
        node = graph.nodes.get(name)
        if node is None:
            raise SessionGraphRefused(f"the graph has no node {name!r} (tool_nodes={names!r})")
        bound: Any = node.bound
        inner = [bound, getattr(bound, "afunc", None), getattr(bound, "func", None)]
        for part in inner:
            tools: Mapping[str, BaseTool] = {}
            if isinstance(part, ToolNode):
                tools = part.tools_by_name
            elif isinstance(part, SignoffToolNode):
                tools = part.by_name
            for tool_name, tool in tools.items():
                if found.get(tool_name, tool) is not tool and tool_name not in given:
                    raise SessionGraphRefused(
                        f"two tool nodes have different tools named {tool_name!r}: pass the "
                        "one to run in tools="
                    )
                found[tool_name] = tool
    return found


def graph_signoffs(graph: Graph) -> list[SignoffTools]:
    """The `SignoffTools` of the graph's `SignoffMiddleware` (found through its after-model
    node) and of its `signoff_tool_node`s."""
    found: list[SignoffTools] = []
    for node in graph.nodes.values():
        bound: Any = node.bound
        for part in (bound, getattr(bound, "afunc", None), getattr(bound, "func", None)):
            owner = getattr(part, "__self__", part)
            if isinstance(owner, SignoffMiddleware | SignoffToolNode):
                found.append(owner.signoff)
    return found


def same_treatment(ours: SignoffTools, theirs: SignoffTools, tool: BaseTool) -> bool:
    mine, other = ours.spec(tool.name), theirs.spec(tool.name)
    return (mine.approval, mine.once_per_run, effect_of(tool, mine)) == (
        other.approval,
        other.once_per_run,
        effect_of(tool, other),
    )


async def invoke_tool(tool: BaseTool, args: dict[str, Any], context: CallContext) -> Any:
    """Run a LangChain tool once for the ledger: arguments that do not fit its schema and a
    `ToolException` (or an error `ToolMessage`) are `ToolFailed`; anything else it raises is
    left to the ledger (retried for a read or idempotent write, else `outcome_unknown`)."""
    schema = tool.tool_call_schema
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        try:
            schema.model_validate(args)
        except ValidationError as e:
            raise ToolFailed(f"the arguments do not fit {tool.name}: {e}") from None
    config: RunnableConfig = {
        "configurable": {"thread_id": context.run_id, IDEMPOTENCY_KEY: context.idempotency_key}
    }
    call = {"type": "tool_call", "id": context.call_id, "name": tool.name, "args": args}
    try:
        output: Any = await tool.ainvoke(call, config)
    except ToolException as e:
        raise ToolFailed(str(e)) from None
    if getattr(output, "status", None) == "error":
        raise ToolFailed(str(output.content))
    content = getattr(output, "content", output)
    blocks = isinstance(content, str) or is_content_blocks(content)
    return content if blocks else json.dumps(content, default=str)


def emit_deltas(chunk: Any, emit: Emit) -> None:
    """The visible text and the reasoning of a model message (chunk) as events."""
    if not isinstance(chunk, AIMessage | AIMessageChunk):
        return
    reasoning = chunk.additional_kwargs.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning:
        emit(SessionEventType.REASONING_DELTA, {"text": reasoning})
    content = chunk.content
    for block in [content] if isinstance(content, str) else content:
        if isinstance(block, str):
            if block:
                emit(SessionEventType.TEXT_DELTA, {"text": block})
        elif block.get("type") == "text" and block.get("text"):
            emit(SessionEventType.TEXT_DELTA, {"text": block["text"]})
        elif block.get("type") == "reasoning" and block.get("reasoning"):
            emit(SessionEventType.REASONING_DELTA, {"text": block["reasoning"]})
