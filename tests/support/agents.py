"""The agents the LangGraph tests run, in the test process and in `tests.support.agent_workers`.

- `ScriptedModel`: a chat model with no API key. Its reply is picked by how many AI messages the
  conversation already has, so a replayed or resumed turn gets the same reply in any process.
- Tools with side effects: each run inserts a row into `agent_effects` (committed at once), so
  any process can count how often a tool really ran.
- `Harness`: one database's key ring, approval store, tool-call ledger, encrypted
  checkpointer and policy decision point, and the two agents built on them: `create_agent`
  with `SignoffMiddleware`, and a custom `StateGraph` whose tool node is `signoff_tool_node`.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, TypedDict

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import tools_condition
from langgraph.types import Command, Interrupt, interrupt

from adapters.demo.model import ScriptedChatModel
from adapters.langgraph import (
    EncryptedPostgresSaver,
    SignoffMiddleware,
    SignoffTools,
    ToolSpec,
    encrypted_checkpointer,
    get_idempotency_key,
    signoff_tool_node,
)
from adapters.langgraph.middleware import Shape
from approvals import ApprovalPolicy, ApprovalStore
from approvals.policies import PolicyPoint, PolicySets
from ledger.calls.model import Effect
from ledger.calls.service import ToolLedger
from ledger.keys import Kek, KeyRing
from ledger.store import Database

Graph = CompiledStateGraph[Any, Any, Any, Any]


class Kind(StrEnum):
    """The ways to put Signoff into a LangGraph agent."""

    AGENT = "create_agent"  # create_agent(..., middleware=[SignoffMiddleware(..., "per_call")])
    BATCHED = "create_agent_batched"  # the same with the default, batched shape
    GRAPH = "tool_node"  # a StateGraph whose tool node is signoff_tool_node(...)


# -- the model -------------------------------------------------------------------------------


def calls(*specs: tuple[str, str, dict[str, Any]]) -> AIMessage:
    """An AI message asking for tool calls, each `(call id, tool name, args)`."""
    return AIMessage(
        content="",
        tool_calls=[{"id": i, "name": n, "args": a, "type": "tool_call"} for i, n, a in specs],
    )


SCRIPTS: dict[str, list[AIMessage]] = {
    "read": [
        calls(("read-1", "lookup_order", {"order_id": "A7"})),
        AIMessage(content="Order A7 was delivered."),
    ],
    "refund": [
        calls(("refund-1", "refund", {"order_id": "A7", "amount": 120})),
        AIMessage(content="I have dealt with the refund."),
    ],
    "parallel": [
        calls(
            ("par-1", "lookup_order", {"order_id": "A7"}),
            ("par-2", "refund", {"order_id": "A7", "amount": 120}),
            ("par-3", "refund", {"order_id": "B2", "amount": 30}),
        ),
        AIMessage(content="Both refunds are done."),
    ],
    "two-turns": [
        calls(("turn1-1", "lookup_order", {"order_id": "A7"})),
        calls(("turn2-1", "refund", {"order_id": "A7", "amount": 120})),
        AIMessage(content="Looked it up, then refunded it."),
    ],
    "mistakes": [
        calls(
            ("bad-1", "cancel_everything", {"really": True}),
            ("bad-2", "lookup_order", {"order": 7}),
            ("bad-3", "refund", {"order_id": "A7", "amount": 120}),
            ("bad-3", "refund", {"order_id": "A7", "amount": 999}),
        ),
        AIMessage(content="Some of that did not work."),
    ],
    "own-interrupt": [
        calls(("own-1", "refund_and_ask", {"order_id": "A7", "amount": 120})),
        AIMessage(content="I have dealt with the refund."),
    ],
}


ScriptedModel = ScriptedChatModel


# -- tools with side effects -------------------------------------------------------------------

EFFECTS_TABLE = """
CREATE TABLE IF NOT EXISTS agent_effects (
    thread_id text NOT NULL,
    tool text NOT NULL,
    args text NOT NULL,
    idempotency_key text,
    pid int NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""


@dataclass
class Effects:
    """Where the tools record what they did.

    Attributes:
        sleep: seconds a refund sleeps after recording its effect (a window to kill it in).
        announce: print "effect <tool>" on stdout once the effect is recorded.
    """

    db: Database
    sleep: float = 0.0
    announce: bool = False

    async def record(self, name: str, args: dict[str, Any], config: RunnableConfig) -> None:
        thread_id = (config.get("configurable") or {}).get("thread_id")
        async with self.db.connection() as conn:
            await conn.execute(
                "INSERT INTO agent_effects (thread_id, tool, args, idempotency_key, pid)"
                " VALUES ($1, $2, $3, $4, $5)",
                str(thread_id),
                name,
                json.dumps(args),
                get_idempotency_key(config),
                os.getpid(),
            )
        if self.announce:
            print(f"effect {name}", flush=True)


async def create_effects_table(db: Database) -> None:
    async with db.connection() as conn:
        await conn.execute(EFFECTS_TABLE)


async def effects_of(db: Database, thread_id: str, tool_name: str | None = None) -> list[Any]:
    """The effects recorded for a thread (of one tool), oldest first, as dicts."""
    async with db.connection() as conn:
        rows = await conn.fetch(
            "SELECT tool, args, idempotency_key, pid FROM agent_effects"
            " WHERE thread_id = $1 AND ($2::text IS NULL OR tool = $2) ORDER BY at",
            thread_id,
            tool_name,
        )
    return [{**dict(r), "args": json.loads(r["args"])} for r in rows]


async def calls_of(db: Database, run_id: str) -> dict[str, dict[str, Any]]:
    """The tool-call ledger's entries of a run, by call id."""
    async with db.connection() as conn:
        rows = await conn.fetch(
            "SELECT call_id, tool, status, attempts, idempotency_key, approval_id"
            " FROM tool_calls WHERE run_id = $1",
            run_id,
        )
    return {r["call_id"]: dict(r) for r in rows}


def build_tools(effects: Effects) -> list[BaseTool]:
    """`lookup_order` (a read) and `refund` (a write that needs approval)."""

    @tool
    async def lookup_order(order_id: str, config: RunnableConfig) -> str:
        """Look up an order."""
        await effects.record("lookup_order", {"order_id": order_id}, config)
        return f"order {order_id}: 120 EUR, delivered"

    @tool
    async def refund(order_id: str, amount: int, config: RunnableConfig) -> str:
        """Refund money on an order."""
        await effects.record("refund", {"order_id": order_id, "amount": amount}, config)
        if effects.sleep:
            await asyncio.sleep(effects.sleep)
        return f"refunded {amount} EUR on {order_id}"

    return [lookup_order, refund]


def build_self_interrupting_tool(effects: Effects) -> BaseTool:
    """The pattern of langgraph issue 6208: the tool does its business, then asks a person
    with `interrupt()` itself."""

    @tool
    async def refund_and_ask(order_id: str, amount: int, config: RunnableConfig) -> str:
        """Refund money on an order, then ask a person to confirm."""
        await effects.record("refund", {"order_id": order_id, "amount": amount}, config)
        answer = interrupt({"question": f"refunded {amount} EUR on {order_id}: all right?"})
        return f"refunded {amount} EUR on {order_id} ({answer})"

    return refund_and_ask


SPECS = (
    ToolSpec("lookup_order", effect=Effect.READ),
    ToolSpec(
        "refund",
        effect=Effect.SINGLE_ATTEMPT,
        approval=ApprovalPolicy(),
        description="Refund money to a customer",
    ),
)


# -- the two agents --------------------------------------------------------------------------


class AgentState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def build_agent(
    kind: Kind,
    model: ScriptedModel,
    tools: Sequence[BaseTool],
    signoff: SignoffTools,
    saver: BaseCheckpointSaver[Any],
) -> Graph:
    """The agent of `kind`: model -> tools (through Signoff) -> model, until no tool calls."""
    if kind is not Kind.GRAPH:
        shape: Shape = "per_call" if kind is Kind.AGENT else "batched"
        return create_agent(
            model,
            tools=list(tools),
            middleware=[SignoffMiddleware(signoff, shape=shape)],
            checkpointer=saver,
        )

    async def call_model(state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"], config)]}

    graph = StateGraph(AgentState)
    graph.add_node("model", call_model)
    graph.add_node("tools", signoff_tool_node(tools, signoff))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    return graph.compile(checkpointer=saver)


@dataclass
class Harness:
    """Everything an agent process needs, on one database."""

    db: Database
    ring: KeyRing
    store: ApprovalStore
    ledger: ToolLedger
    saver: EncryptedPostgresSaver
    policy: PolicyPoint | None = None
    """The policy decision point every agent of this harness is judged by (None: the tools'
    specs alone)."""

    def signoff(self, specs: Sequence[ToolSpec] | None = None) -> SignoffTools:
        specs = SPECS if specs is None else specs
        return SignoffTools(self.ledger, self.store, specs, policy=self.policy)

    def agent(
        self, kind: Kind, script: str, effects: Effects | None = None
    ) -> tuple[Graph, ScriptedModel]:
        """The agent of `kind` running `SCRIPTS[script]` with the usual tools and specs."""
        model = ScriptedModel(script=SCRIPTS[script])
        tools = build_tools(effects or Effects(self.db))
        return build_agent(kind, model, tools, self.signoff(), self.saver), model


@asynccontextmanager
async def open_harness(
    url: str, kek: Kek | None = None, *, lease_seconds: float = 30.0
) -> AsyncIterator[Harness]:
    """A harness on `url`; the KEK defaults to the environment's (SIGNOFF_KEK)."""
    async with await Database.connect(url, pool_size=4) as db:
        ring = await KeyRing.open(db, kek)
        store = ApprovalStore(db, ring, poll_interval=0.05)
        ledger = ToolLedger(db, ring, lease_seconds=lease_seconds, poll_interval=0.05)
        point = PolicyPoint(PolicySets(db, ring))
        try:
            async with encrypted_checkpointer(db, ring, max_size=4) as saver:
                yield Harness(db, ring, store, ledger, saver, point)
        finally:
            await point.close()
            await ledger.close()
            await store.close()


# -- talking to a paused agent ---------------------------------------------------------------


def thread(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


async def before_tools(graph: Graph, config: RunnableConfig) -> RunnableConfig:
    """The config of the latest checkpoint about to run the tool node: invoking the graph
    from it replays the tool calls (what a retry or a time-travel fork does)."""
    async for snapshot in graph.aget_state_history(config):
        if "tools" in snapshot.next:
            return snapshot.config
    raise AssertionError("no checkpoint before the tool node")


def requests_of(interrupts: Sequence[Interrupt]) -> list[dict[str, Any]]:
    """The approval requests the agent paused for, whichever kind paused: one interrupt per
    call (create_agent, per call) or one interrupt for all calls of a message (batched, the
    tool node)."""
    found: list[dict[str, Any]] = []
    for pause in interrupts:
        value = pause.value
        if "action_requests" in value:  # the middleware's batched shape
            found += value["action_requests"]
        else:
            found += value["requests"] if value.get("type") == "tool_approvals" else [value]
    return found


def answer(interrupts: Sequence[Interrupt], by_call: Mapping[str, Any]) -> Command[Any]:
    """The resume command giving each paused call (by tool call id) its resume value."""
    resume: dict[str, Any] = {}
    for pause in interrupts:
        value = pause.value
        if "action_requests" in value:  # one decision per action request, in order
            decisions = [by_call[r["tool_call_id"]] for r in value["action_requests"]]
            resume[pause.id] = {"decisions": decisions}
        elif value.get("type") == "tool_approvals":
            resume[pause.id] = {
                r["tool_call_id"]: by_call[r["tool_call_id"]] for r in value["requests"]
            }
        else:
            resume[pause.id] = by_call[value["tool_call_id"]]
    return Command(resume=resume)


def answer_all(interrupts: Sequence[Interrupt], value: Any) -> Command[Any]:
    """The resume command giving every paused call the same value (None, "continue", ...)."""
    return answer(interrupts, {r["tool_call_id"]: value for r in requests_of(interrupts)})


def summary(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """The conversation as JSON: what a worker prints and a test compares."""
    out: list[dict[str, Any]] = []
    for m in messages:
        row: dict[str, Any] = {"type": m.type, "content": m.content}
        if isinstance(m, ToolMessage):
            row |= {"tool_call_id": m.tool_call_id, "status": m.status, "name": m.name}
        if isinstance(m, AIMessage) and m.tool_calls:
            row["tool_calls"] = [c["id"] for c in m.tool_calls]
        out.append(row)
    return out
