"""Running a LangGraph agent one model call at a time, for the session's Steps.

`RunModel` runs the graph on the session's thread (its Flow ID) in Signoff's encrypted
checkpointer, with `interrupt_before=` the tool nodes and `signoff_deferred_tools` set: the
graph makes its model call and stops before its tool node; the middleware and the tool node
ask nobody and run nothing. Each tool call then runs in a Step of its own, through the ledger,
with the arguments read from that checkpoint (`call_args`). The next `RunModel` resumes the
graph: its tool node finds every call in the ledger and replays the recorded outcomes, and the
graph makes its next model call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool

from adapters.langgraph import EncryptedPostgresSaver, SignoffTools
from adapters.langgraph.middleware import EDIT_NOTICE, announce_edit
from adapters.langgraph.request_context import (
    request_context,
    tool_args_schema,
    with_args_schema,
)
from adapters.langgraph.tools import DEFERRED, REQUESTED_BY, RUN_ID, effect_of
from approvals import RequestContext
from approvals.policies import PolicyPoint
from ledger.calls.model import CallContext

from ..errors import SessionGraphRefused, TurnRefused
from ..logic import DexTool, SignoffDex
from .graph import Emit, Graph, emit_deltas, graph_signoffs, invoke_tool, node_tools, same_treatment

__all__ = ["AgentSession", "ModelStop", "PendingCall", "user_message_id"]

# The arguments a tool Step read from its checkpoint, by (session, call): the tool's run, later
# in the same Step (the same task), compares them with the arguments it is given.
_read_args: ContextVar[tuple[tuple[str, str], dict[str, Any]] | None] = ContextVar(
    "signoff_session_read_args", default=None
)


def user_message_id(session_id: str, turn: int) -> str:
    """The id of a turn's user message: a `RunModel` that runs again finds it in the state
    and does not add it twice."""
    return f"signoff-user-{session_id}-{turn}"


@dataclass(frozen=True)
class PendingCall:
    """A tool call of the model message the graph stopped after."""

    call_id: str
    tool: str


@dataclass(frozen=True)
class ModelStop:
    """Where `RunModel` left the graph: before its tool node with `calls` to run, or
    finished (`calls` empty)."""

    checkpoint_id: str
    calls: list[PendingCall]


@dataclass
class AgentSession:
    """What a Worker's session Steps use: the compiled graph, Signoff's encrypted
    checkpointer, the ledger, store and tool specs (`SignoffTools`, the same the graph's
    `SignoffMiddleware` or `signoff_tool_node` uses), and the tools.

    Args:
        graph: `create_agent(...)` with `SignoffMiddleware` first, or a `StateGraph` whose tool
            node is `signoff_tool_node`, compiled; its own checkpointer is replaced.
        signoff: the ledger, store and specs; they must treat every tool as the graph's
            middleware or tool node does (with `interrupt_on`, pass `middleware.signoff`),
            else `SessionGraphRefused`.
        tools: tools the graph's tool nodes do not hold (added by middleware at run time);
            they win over a node's tool of the same name.
        tool_nodes: the names of the graph's tool nodes (`"tools"` in create_agent).
        messages_key: the state key of the conversation.
        stream_text: write the model's text and reasoning as events on the session's Dex
            stream (what a client shows live; Dex then holds that text).
        edit_notice: told to the model before the result of a call a reviewer edited (as
            `SignoffMiddleware` does); None: nothing.
        policy: the tool Steps' policy decision point, as `SignoffDex.of` takes it (True: one
            built on the ledger's database, closed by `close`).
    """

    graph: Graph
    saver: EncryptedPostgresSaver
    signoff: SignoffTools
    tools: Sequence[BaseTool] = ()
    tool_nodes: tuple[str, ...] = ("tools",)
    messages_key: str = "messages"
    stream_text: bool = True
    edit_notice: str | None = EDIT_NOTICE
    policy: PolicyPoint | bool = True
    by_name: dict[str, BaseTool] = field(init=False)
    _runtime: SignoffDex | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        if self.graph.interrupt_before_nodes or self.graph.interrupt_after_nodes:
            raise SessionGraphRefused(
                "the graph is compiled with interrupt_before/interrupt_after: a session pauses "
                "only before its tool nodes, for the calls' Steps"
            )
        given = {t.name: t for t in self.tools}
        self.by_name = node_tools(self.graph, self.tool_nodes, set(given)) | given
        for theirs in graph_signoffs(self.graph):
            differ = [
                n for n, t in self.by_name.items() if not same_treatment(self.signoff, theirs, t)
            ]
            if differ:
                # The Steps ask for approvals by the session's specs: a policy only the
                # graph's middleware holds (its interrupt_on) would never be asked for.
                raise SessionGraphRefused(
                    f"the graph's SignoffMiddleware or tool node treats {sorted(differ)} "
                    "otherwise than the session's SignoffTools: pass the same one (with "
                    "interrupt_on, the middleware's own: middleware.signoff)"
                )
        self.graph = self.graph.copy(update={"checkpointer": self.saver})

    def runtime(self) -> SignoffDex:
        """The tool Steps' runtime (built once): the same store and ledger, each tool as a
        `DexTool`, and the policy decision point."""
        if self._runtime is None:
            tools = [self._dex_tool(t) for t in self.by_name.values()]
            self._runtime = SignoffDex.of(
                self.signoff.approvals, self.signoff.ledger, *tools, policy=self.policy
            )
        return self._runtime

    async def close(self) -> None:
        """Close the policy decision point the runtime built (nothing else)."""
        if self._runtime is not None:
            await self._runtime.close()

    def _dex_tool(self, tool: BaseTool) -> DexTool:
        spec = self.signoff.spec(tool.name)
        spec = replace(spec, effect=effect_of(tool, spec))
        if spec.approval is not None:  # reviewers edit by the tool's schema
            spec = replace(spec, approval=with_args_schema(spec.approval, tool))
        # A policy may ask for an approval the tool's own spec does not: any call may be
        # edited by a reviewer, so any call's edit is told.
        notice = self.edit_notice

        async def run(args: dict[str, Any], context: CallContext) -> Any:
            content = await invoke_tool(tool, args, context)
            if notice is None:
                return content
            asked = await self._asked_args(context.run_id, context.call_id)
            if asked is None or asked == args:
                return content
            # A reviewer edited the call: recorded with the result, so every replay says so.
            message = ToolMessage(content=content, tool_call_id=context.call_id, name=tool.name)
            return announce_edit(message, notice, tool.name, args).content

        return DexTool(spec, run, tool_args_schema(tool))

    async def _asked_args(self, session_id: str, call_id: str) -> dict[str, Any] | None:
        """The arguments the model gave a call: as this Step read them from the checkpoint its
        input names (`call_args`), else from the session's latest checkpoint."""
        read = _read_args.get()
        if read is not None and read[0] == (session_id, call_id):
            return read[1]
        state = await self.graph.aget_state(self.config(session_id, "agent"))
        for message in reversed(self._messages(state.values)):
            if isinstance(message, AIMessage):
                for call in message.tool_calls:
                    if call.get("id") == call_id:
                        return dict(call["args"])
                return None
        return None

    def config(
        self, session_id: str, requested_by: str, checkpoint_id: str | None = None
    ) -> RunnableConfig:
        """The graph's config for the session: its thread and run, calls deferred; at
        `checkpoint_id` when given, else at the thread's latest checkpoint."""
        configurable: dict[str, Any] = {
            "thread_id": session_id,
            RUN_ID: session_id,
            DEFERRED: True,
            REQUESTED_BY: requested_by,
        }
        if checkpoint_id is not None:
            configurable["checkpoint_id"] = checkpoint_id
        return {"configurable": configurable}

    def _messages(self, values: Any) -> list[BaseMessage]:
        found = values.get(self.messages_key) if isinstance(values, Mapping) else None
        return list(found or [])

    async def run_model(
        self,
        session_id: str,
        turn: int,
        text: str | None,
        requested_by: str,
        emit: Emit,
        checkpoint_id: str | None = None,
    ) -> ModelStop:
        """Run the graph from `checkpoint_id` (the one Dex names: the previous stop; None: the
        thread's latest) up to its next model call's end: to the tool node, or to the end.

        A `RunModel` that runs again starts from the same checkpoint, so what its first
        attempt did is left on a branch nobody reads: the user message is added once, the
        calls already recorded replay, and only the model call is made again. (Checkpoint ids
        follow each Worker's clock, so "the latest" could be another Worker's older one.)

        Raises:
            TurnRefused: the graph paused on an interrupt of its own, stopped elsewhere, or
                the model's call ids are empty or repeated.
            ToolOutsideStep: a tool would run inside the graph (a plain ToolNode, a subgraph
                compiled with `checkpointer=False`, a node that invokes a tool itself).
        """
        config = self.config(session_id, requested_by, checkpoint_id)
        state = await self.graph.aget_state(config)
        messages = self._messages(state.values)
        graph_input: Any = None
        if text is not None and not any(
            m.id == user_message_id(session_id, turn) for m in messages
        ):
            human = HumanMessage(content=text, id=user_message_id(session_id, turn))
            graph_input = {self.messages_key: [human]}
        elif self._before_tools(state.next) and not await self._all_recorded(session_id, messages):
            return self._stop(session_id, state)  # this model call had finished already
        last = checkpoint_id
        parts: Any = self.graph.astream(
            graph_input,
            config,
            stream_mode=["messages", "checkpoints"],
            subgraphs=True,
            interrupt_before=list(self.tool_nodes),
        )
        async for namespace, mode, payload in parts:
            if mode == "messages" and self.stream_text:
                emit_deltas(payload[0], emit)
            elif mode == "checkpoints" and not namespace:  # the root graph's, in order
                last = str(payload["config"]["configurable"]["checkpoint_id"])
        state = await self.graph.aget_state(self.config(session_id, requested_by, last))
        if any(task.interrupts for task in state.tasks):
            raise TurnRefused(
                session_id, "the graph raised an interrupt of its own; a session cannot answer it"
            )
        if state.next and not self._before_tools(state.next):
            raise TurnRefused(session_id, f"the graph stopped before {list(state.next)}")
        return self._stop(session_id, state)

    def _before_tools(self, next_nodes: Sequence[str]) -> bool:
        return any(n in self.tool_nodes for n in next_nodes)

    def _stop(self, session_id: str, state: Any) -> ModelStop:
        checkpoint_id = str(state.config["configurable"]["checkpoint_id"])
        if not self._before_tools(state.next):
            return ModelStop(checkpoint_id, [])
        messages = self._messages(state.values)
        at = next(
            (i for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], AIMessage)),
            None,
        )
        last = messages[at] if at is not None else None
        tool_calls = list(last.tool_calls) if isinstance(last, AIMessage) else []
        ids = [str(c.get("id") or "") for c in tool_calls]
        if not all(ids) or len(set(ids)) != len(ids):
            raise TurnRefused(session_id, f"tool call ids must be non-empty and unique: {ids}")
        # The ledger keeps one entry per (session, call id): an id used before would replay
        # that call's outcome (or be refused with other arguments), never run this call.
        earlier = {
            str(c.get("id"))
            for m in messages[:at]
            if isinstance(m, AIMessage)
            for c in m.tool_calls
        }
        if reused := sorted(earlier.intersection(ids)):
            raise TurnRefused(session_id, f"tool call ids used before in the session: {reused}")
        calls = [PendingCall(i, c["name"]) for c, i in zip(tool_calls, ids, strict=True)]
        return ModelStop(checkpoint_id, calls)

    async def _all_recorded(self, session_id: str, messages: list[BaseMessage]) -> bool:
        last = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
        for call in last.tool_calls if last is not None else []:
            name = call["name"]
            once = name if self.signoff.spec(name).once_per_run else None
            record = await self.signoff.ledger.answering(session_id, str(call["id"]), once)
            if record is None or not record.status.final:
                return False
        return True

    async def call_args(self, session_id: str, checkpoint_id: str, call_id: str) -> dict[str, Any]:
        """The arguments of call `call_id`, from the model message in that checkpoint.

        Raises:
            TurnRefused: the checkpoint holds no such call.
        """
        return (await self.asked_call(session_id, checkpoint_id, call_id))[0]

    async def asked_call(
        self, session_id: str, checkpoint_id: str, call_id: str
    ) -> tuple[dict[str, Any], RequestContext | None]:
        """The arguments of call `call_id` and what led to it (`request_context`), from the
        conversation in that checkpoint.

        Raises:
            TurnRefused: the checkpoint holds no such call.
        """
        config: RunnableConfig = {
            "configurable": {
                "thread_id": session_id,
                "checkpoint_ns": "",
                "checkpoint_id": checkpoint_id,
            }
        }
        found = await self.saver.aget_tuple(config)
        values = found.checkpoint["channel_values"] if found is not None else {}
        messages = self._messages(values)
        for message in reversed(messages):
            if isinstance(message, AIMessage):
                for call in message.tool_calls:
                    if call.get("id") == call_id:
                        args = dict(call["args"])
                        _read_args.set(((session_id, call_id), args))  # for this Step's tool
                        return args, request_context(messages, call_id)
        raise TurnRefused(session_id, f"checkpoint {checkpoint_id} has no tool call {call_id!r}")

    async def add_messages(
        self,
        session_id: str,
        requested_by: str,
        messages: Sequence[BaseMessage],
        checkpoint_id: str | None,
    ) -> str:
        """Add messages to the conversation at `checkpoint_id` (what a failed turn leaves), so
        the next turn's model reads them; the id of the checkpoint that holds them."""
        config = self.config(session_id, requested_by, checkpoint_id)
        written = await self.graph.aupdate_state(config, {self.messages_key: list(messages)})
        return str(written["configurable"]["checkpoint_id"])

    async def conversation(
        self, session_id: str, checkpoint_id: str | None = None
    ) -> list[BaseMessage]:
        """The session's messages at `checkpoint_id` (None: the thread's latest checkpoint)."""
        state = await self.graph.aget_state(self.config(session_id, "agent", checkpoint_id))
        return self._messages(state.values)
