"""`signoff_tool_node`: a `ToolNode` replacement for custom `StateGraph`s, run through Signoff.

It runs the calls of the last model message in parallel. Calls that need approval are asked
about together, in one pause: the interrupt value is `{"type": "tool_approvals", "requests":
[...]}` (each request HumanInTheLoopMiddleware's per-call shape plus the approval id). Resume
with nothing (store-decided), or a mapping from tool call id (or approval id) to a decision or
signed token; a single decision or token answers a single call. An answer that is refused
writes nothing: the node pauses again, the value carrying `refused` (why). A decision is
recorded as self-confirmed by this process on a self-confirm approval; a four-eyes approval
(and with `store_only=True` any) is decided by the store only. Requests carry what led to
each call and its tool's argument schema, as `SignoffMiddleware`'s do. Every call is judged by
the policy decision point first (`SignoffTools.judge`): one it refuses pauses nothing and
never runs.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, ToolException
from langgraph.types import interrupt
from pydantic import ValidationError

from approvals import Approval
from approvals.policies import Verdict

from .tools import SignoffTools, call_id_of, is_content_blocks, turn_of

__all__ = ["SignoffToolNode", "signoff_tool_node"]

Node = Callable[[Any, RunnableConfig], Awaitable[dict[str, Any]]]


class SignoffToolNode:
    """The node: `graph.add_node("tools", signoff_tool_node(tools, signoff))`; bind the model
    to `node.tools`."""

    def __init__(
        self,
        tools: Sequence[BaseTool],
        signoff: SignoffTools,
        messages_key: str = "messages",
        *,
        store_only: bool | None = None,
    ) -> None:
        self.tools = list(tools)
        self.by_name = {t.name: t for t in self.tools}
        self.signoff = signoff
        self.messages_key = messages_key
        self.store_only = store_only

    async def __call__(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        messages = list(
            state[self.messages_key]
            if isinstance(state, Mapping)
            else getattr(state, self.messages_key)
        )
        last = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
        calls = list(last.tool_calls) if last is not None else []
        if not calls:
            return {self.messages_key: []}
        ids = [call_id_of(call) for call in calls]
        # A repeated call id is refused, never run: nobody is asked about it.
        unique = [c for c, i in zip(calls, ids, strict=True) if ids.count(i) == 1]
        # Each call judged once in this run of the node (a resume re-runs it: judged again).
        judged = await asyncio.gather(
            *(self.signoff.judge(c, config, self.by_name.get(c["name"])) for c in unique)
        )
        verdicts = {call_id_of(c): v for c, v in zip(unique, judged, strict=True)}
        approvals = await self._decided(unique, verdicts, messages, config)
        tasks = [
            asyncio.ensure_future(self._one(c, messages, config, verdicts.get(i), approvals.get(i)))
            for c, i in zip(calls, ids, strict=True)
        ]
        try:
            results = await asyncio.gather(*tasks)
        except BaseException:
            # One call raised: stop the others rather than leave them running unseen.
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        return {self.messages_key: list(results)}

    async def _decided(
        self,
        calls: list[Any],
        verdicts: Mapping[str, Verdict | None],
        messages: list[Any],
        config: RunnableConfig,
    ) -> dict[str, Approval]:
        """Ask for every approval the message's verdicts need (with what led to each call and
        its tool's argument schema); pause once until all are decided."""
        asked = await asyncio.gather(
            *(
                self.signoff.pending_approval(
                    call,
                    config,
                    messages=messages,
                    tool=self.by_name.get(call["name"]),
                    verdict=verdicts[call["id"]],
                )
                for call in calls
            )
        )
        approvals = {c["id"]: a for c, a in zip(calls, asked, strict=True) if a is not None}
        by_id = {c["id"]: c for c in calls}
        refused: str | None = None
        # Every call asked about stays in every request, so a replayed answer meets the same
        # requests in every run.
        while any(not a.status.final for a in approvals.values()):
            value: dict[str, Any] = {
                "type": "tool_approvals",
                "requests": [
                    self.signoff.approval_request(a, by_id[i]) for i, a in approvals.items()
                ],
            }
            if refused is not None:
                value["refused"] = refused
            answers = interrupt(value)
            reasons: list[str] = []
            for call_id, approval in approvals.items():
                answer, reason = _answer_for(answers, call_id, approval, len(approvals))
                if reason is None:
                    approval, reason = await self.signoff.resolve(
                        approval, answer, by_id[call_id], config, store_only=self.store_only
                    )
                approvals[call_id] = approval
                if reason is not None:
                    reasons.append(f"{call_id}: {reason}")
            refused = "; ".join(reasons) or None
        return approvals

    async def _one(
        self,
        call: Mapping[str, Any],
        messages: list[Any],
        config: RunnableConfig,
        verdict: Verdict | None,
        approval: Approval | None,
    ) -> ToolMessage:
        turn, same = turn_of(messages, call["id"])
        tool = self.by_name.get(call["name"])
        if len(same) > 1:
            return await self.signoff.refuse_duplicate(call, same, tool, config, turn)

        async def execute(args: dict[str, Any], tool_config: RunnableConfig) -> ToolMessage:
            if tool is None:
                known = ", ".join(sorted(self.by_name)) or "none"
                return _error(call, f"there is no tool named {call['name']!r} (tools: {known})")
            try:
                output = await tool.ainvoke(args, tool_config)
            except ValidationError as e:
                return _error(call, f"the arguments do not fit {call['name']}: {e}")
            except ToolException as e:
                return _error(call, str(e))
            blocks = isinstance(output, str) or is_content_blocks(output)  # files stay files
            content = output if blocks else json.dumps(output, default=str)
            return ToolMessage(content=content, tool_call_id=call["id"], name=call["name"])

        return await self.signoff.run(
            call, tool, config, execute, verdict=verdict, approval=approval, turn_id=turn
        )


def signoff_tool_node(
    tools: Sequence[BaseTool],
    signoff: SignoffTools,
    messages_key: str = "messages",
    *,
    store_only: bool | None = None,
) -> SignoffToolNode:
    return SignoffToolNode(tools, signoff, messages_key, store_only=store_only)


def _error(call: Mapping[str, Any], reason: str) -> ToolMessage:
    return ToolMessage(content=reason, tool_call_id=call["id"], name=call["name"], status="error")


def _answer_for(value: Any, call_id: str, approval: Approval, count: int) -> tuple[Any, str | None]:
    """This call's part of a resume value, or why it has none that can be read."""
    if value is None or value == "continue":
        return None, None
    if isinstance(value, Mapping) and (call_id in value or approval.approval_id in value):
        return value.get(call_id, value.get(approval.approval_id)), None
    if isinstance(value, Mapping) and "type" not in value and "decisions" not in value:
        return None, None  # answers for other calls only: read the store for this one
    if count == 1:
        return value, None
    return None, (
        "several calls wait for approval: resume with a mapping from tool call id to its "
        "decision or token, or with nothing"
    )
