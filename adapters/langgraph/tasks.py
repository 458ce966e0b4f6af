"""`tool_task` and `fan_out`: one tool call per `Send`, through Signoff.

```python
graph.add_node("rate", tool_task(shipping_rate, signoff, into="rates"))
graph.add_conditional_edges("plan", fan_out("rate", "items"), ["rate"])
```

`fan_out` sends each mapping of the state key `items` to `rate`; each `rate` task runs
`shipping_rate` with that mapping as its arguments, asks for approval when the policy (or the
tool's spec) says so (pausing only its own task; a call the policy refuses never runs), and
writes `{"rates": [message]}`: the call's `ToolMessage`, in a list, so LangGraph's list
reducers (`operator.add`, `add_messages`) collect the tasks' writes.

A `Send` argument that is a model's tool call (`{"type": "tool_call", "name", "args", "id"}`,
as an `AIMessage` holds them) runs as that call, under the model's id.

The call id makes a re-run safe. LangGraph runs a `Send` task again from the top after an
interrupt, after a crash, or when a run is replayed from an earlier checkpoint; a call the
ledger finished is then replayed, never run again. The id is the argument's `call_id` field
when it has one (removed from the tool's arguments), else derived from the arguments:
`<tool>:<keyed digest of the arguments>`, so the same arguments in one run are one call (give
explicit ids to run them twice). The digest is an HMAC under the ring's value-MAC key, so
the id does not reveal guessable arguments; after a key rotation, the id a call was recorded
or asked about under is still found (every live key is tried).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, ToolException
from langgraph.types import Send, interrupt
from pydantic import ValidationError

from adapters.runtime.ids import derived_call_id

from .errors import InvalidSend
from .tools import SignoffTools, is_content_blocks, run_id_of

__all__ = ["CALL_ID", "SignoffToolTask", "fan_out", "tool_task"]

CALL_ID = "call_id"
_TAG = b"signoff.send.v1|"


class SignoffToolTask:
    """A `Send` target running one call of `tool` (see the module's docstring)."""

    def __init__(
        self,
        tool: BaseTool,
        signoff: SignoffTools,
        *,
        into: str,
        id_key: str | None = CALL_ID,
        store_only: bool | None = None,
    ) -> None:
        self.tool = tool
        self.signoff = signoff
        self.into = into
        self.id_key = id_key
        self.store_only = store_only

    async def __call__(self, state: Any, config: RunnableConfig) -> dict[str, Any]:
        """`state` is the `Send` argument."""
        arg = state
        if not isinstance(arg, Mapping):
            raise InvalidSend(
                f"{self.tool.name}: a Send argument is a mapping of arguments, "
                f"not {type(arg).__name__}"
            )
        if arg.get("type") == "tool_call":  # a model's tool call, sent as it is
            return await self._run_call(_model_call(arg, self.tool.name), config)
        args = dict(arg)
        explicit = args.pop(self.id_key, None) if self.id_key else None
        if explicit is not None and not isinstance(explicit, str):
            raise InvalidSend(f"{self.tool.name}: {self.id_key!r} is text, not {explicit!r}")
        call_id = explicit or await self.derived_id(args, config)
        return await self._run_call({"id": call_id, "name": self.tool.name, "args": args}, config)

    async def _run_call(self, call: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        # Judged each time the task runs (a resume re-runs it from the top).
        verdict = await self.signoff.judge(call, config, self.tool)
        # A Send carries no conversation: the request has the tool's schema, no context.
        approval = await self.signoff.pending_approval(
            call, config, tool=self.tool, verdict=verdict
        )
        refused: str | None = None
        while approval is not None and not approval.status.final:
            # One approval per task: every resume position of this task is its own. A refused
            # answer records nothing (a replay is refused again) and is asked about anew.
            value = interrupt(self.signoff.approval_request(approval, call, refused=refused))
            approval, refused = await self.signoff.resolve(
                approval, value, call, config, store_only=self.store_only
            )
        message = await self.signoff.run(
            call, self.tool, config, self._execute(call), verdict=verdict, approval=approval
        )
        return {self.into: [message]}

    async def derived_id(self, args: dict[str, Any], config: RunnableConfig) -> str:
        """`<tool>:<HMAC of the arguments>` (`runtime.derived_call_id`)."""
        return await derived_call_id(
            self.signoff.ledger,
            self.signoff.approvals,
            run_id=run_id_of(config),
            tool=self.tool.name,
            args=args,
            tag=_TAG,
            prefix=f"{self.tool.name}:",
            # A policy set may ask about any tool: look for an approval asked under an older key.
            asks=self.signoff.point is not None
            or self.signoff.spec(self.tool.name).approval is not None,
        )

    def _execute(self, call: Mapping[str, Any]) -> Callable[[dict[str, Any], RunnableConfig], Any]:
        tool = self.tool

        async def execute(args: dict[str, Any], tool_config: RunnableConfig) -> ToolMessage:
            try:
                output = await tool.ainvoke(args, tool_config)
            except ValidationError as e:
                return _error(call, f"the arguments do not fit {tool.name}: {e}")
            except ToolException as e:
                return _error(call, str(e))
            if isinstance(output, ToolMessage):
                return output
            content = (
                output
                if isinstance(output, str) or is_content_blocks(output)
                else json.dumps(output, default=str)
            )
            return ToolMessage(content=content, tool_call_id=call["id"], name=tool.name)

        return execute


def tool_task(
    tool: BaseTool,
    signoff: SignoffTools,
    *,
    into: str,
    id_key: str | None = CALL_ID,
    store_only: bool | None = None,
) -> SignoffToolTask:
    """A `Send` target that runs `tool` with the `Send` argument through Signoff and returns
    `{into: [ToolMessage]}`. `id_key` names the argument field holding an explicit call id
    (None: always derive it). `store_only`: whether only the store decides (a decision in a
    resume value is refused and asked again) for self-confirm approvals too; a four-eyes
    approval is decided in the store only whatever it says, as for `SignoffMiddleware`."""
    return SignoffToolTask(tool, signoff, into=into, id_key=id_key, store_only=store_only)


def fan_out(
    target: str, over: str | Callable[[Any], Iterable[Mapping[str, Any]]]
) -> Callable[[Any], list[Send]]:
    """A conditional-edge path: one `Send(target, item)` per mapping in the state key `over`
    (or in `over(state)`).

    Raises (when LangGraph takes the edge):
        InvalidSend: an item is not a mapping.
    """

    def path(state: Any) -> list[Send]:
        if callable(over):
            items = over(state)
        else:
            items = state[over] if isinstance(state, Mapping) else getattr(state, over)
        sends = []
        for item in items or ():
            if not isinstance(item, Mapping):
                raise InvalidSend(f"fan_out sends mappings, not {type(item).__name__}")
            sends.append(Send(target, dict(item)))
        return sends

    # LangGraph names a branch after its function: one name per target, so a node can fan
    # out to several.
    path.__name__ = path.__qualname__ = f"fan_out_{target}"
    return path


def _model_call(arg: Mapping[str, Any], tool: str) -> dict[str, Any]:
    """A tool call a model asked for (`{"type": "tool_call", "name", "args", "id"}`) as this
    task's call: its id is the model's."""
    if arg.get("name") != tool:
        raise InvalidSend(f"a call to {str(arg.get('name'))[:100]!r} was sent to {tool!r}")
    if not isinstance(arg.get("id"), str) or not arg["id"]:
        raise InvalidSend(f"the call to {tool!r} has no id")
    if not isinstance(arg.get("args"), Mapping):
        raise InvalidSend(f"the arguments of the call to {tool!r} are not a mapping")
    return {"id": arg["id"], "name": tool, "args": dict(arg["args"])}


def _error(call: Mapping[str, Any], reason: str) -> ToolMessage:
    return ToolMessage(content=reason, tool_call_id=call["id"], name=call["name"], status="error")
