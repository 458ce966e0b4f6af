"""The graphs of `tests.test_langgraph_seeds`, built the same in the test process and in
`tests.support.seed_workers`: a fan-out of `tool_task`s, and `one_use` nodes (async with `config`,
sync without) that record a step, ask for approval, then do another step.

Everything that really runs appends a line to a side-effect file (`Runs`): the tools, the
steps, and every entry into a node, so a test counts across processes how often LangGraph
re-ran a node and how often the work inside it ran.
"""

from __future__ import annotations

import asyncio
import json
import operator
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AnyMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.graph.state import CompiledStateGraph

from adapters.langgraph import (
    SignoffTools,
    ToolSpec,
    ask,
    ask_sync,
    fan_out,
    one_use,
    step,
    step_sync,
    tool_task,
)
from approvals import ApprovalPolicy
from ledger.calls.model import CallStatus, Effect

Graph = CompiledStateGraph[Any, Any, Any, Any]

SPECS = (
    ToolSpec("lookup_order", effect=Effect.READ),
    ToolSpec("refund", approval=ApprovalPolicy(), description="Refund money to a customer"),
    ToolSpec("discount", approval=ApprovalPolicy(), description="Give a discount"),
)
ORDERS = [{"order_id": "A7"}, {"order_id": "B2"}]
REFUNDS = [{"call_id": "refund-A7", "order_id": "A7", "amount": 120}]


@dataclass(frozen=True)
class Runs:
    """A file with one JSON line per thing that ran: `{"what", "pid"}`."""

    path: Path

    def add(self, what: str) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps({"what": what, "pid": os.getpid()}) + "\n")

    def counts(self) -> Counter[str]:
        if not self.path.exists():
            return Counter()
        return Counter(json.loads(line)["what"] for line in self.path.read_text().splitlines())

    def pids(self, what: str) -> list[int]:
        lines = self.path.read_text().splitlines()
        return [r["pid"] for r in map(json.loads, lines) if r["what"] == what]


def build_tools(runs: Runs, sleep: float = 0.0) -> tuple[BaseTool, BaseTool]:
    """`lookup_order` and `refund`; a refund announces "effect refund" on stdout and sleeps
    `sleep` seconds after recording its run (a window to kill its process in)."""

    @tool
    async def lookup_order(order_id: str) -> str:
        """Look up an order."""
        runs.add(f"lookup_order {order_id}")
        return f"order {order_id}: delivered"

    @tool
    async def refund(order_id: str, amount: int) -> str:
        """Refund money on an order."""
        runs.add(f"refund {order_id}")
        if sleep:
            print("effect refund", flush=True)
            await asyncio.sleep(sleep)
        return f"refunded {amount} EUR on {order_id}"

    return lookup_order, refund


# -- the fan-out ---------------------------------------------------------------------------


class FanState(TypedDict, total=False):
    orders: list[dict[str, Any]]
    refunds: list[dict[str, Any]]
    results: Annotated[list[AnyMessage], add_messages]


def fan_out_graph(
    runs: Runs, signoff: SignoffTools, saver: BaseCheckpointSaver[Any], sleep: float = 0.0
) -> Graph:
    """plan -> a `lookup` task per order and a `refund` task per refund -> end."""
    lookup_order, refund = build_tools(runs, sleep)
    tasks = {
        "lookup": tool_task(lookup_order, signoff, into="results"),
        "refund": tool_task(refund, signoff, into="results"),
    }

    def counted(name: str) -> Any:
        async def node(arg: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
            runs.add(f"enter {name}")
            return await tasks[name](arg, config)

        return node

    graph = StateGraph(FanState)
    graph.add_node("plan", lambda state: {})
    graph.add_node("lookup", counted("lookup"))
    graph.add_node("refund", counted("refund"))
    graph.add_edge(START, "plan")
    graph.add_conditional_edges("plan", fan_out("lookup", "orders"), ["lookup"])
    graph.add_conditional_edges(
        "plan", fan_out("refund", lambda state: state["refunds"]), ["refund"]
    )
    graph.add_edge("lookup", END)
    graph.add_edge("refund", END)
    return graph.compile(checkpointer=saver)


# -- one_use nodes -------------------------------------------------------------------------


class SettleState(TypedDict, total=False):
    order_id: str
    notes: Annotated[list[str], operator.add]


def settle_graph(
    kind: str,
    runs: Runs,
    signoff: SignoffTools,
    saver: BaseCheckpointSaver[Any],
    sleep: float = 0.0,
) -> Graph:
    """One `one_use` node, `settle`: draft (a step), ask for the refund, then pay (a step;
    like a refund it announces and sleeps `sleep` seconds after recording its run). `kind` is
    "async" (an async node taking `config`) or "sync" (a sync node without)."""

    def draft(args: dict[str, Any]) -> str:
        runs.add("draft")
        return f"draft for {args['order_id']}"

    async def pay(args: dict[str, Any]) -> str:
        runs.add("pay")
        if sleep:
            print("effect pay", flush=True)
            await asyncio.sleep(sleep)
        return f"paid {args['amount']} EUR on {args['order_id']}"

    async def settle_async(state: SettleState, config: RunnableConfig) -> dict[str, Any]:
        assert config["configurable"]["thread_id"]
        runs.add("enter settle")
        drafted = await step("draft", draft, {"order_id": state["order_id"]})
        answer = await ask("refund", {"order_id": state["order_id"], "amount": 120})
        if answer.status is not CallStatus.SUCCEEDED:
            return {"notes": [drafted.result, f"skipped: {answer.status}"]}
        paid = await step("pay", pay, answer.result)
        return {"notes": [drafted.result, paid.result or f"not paid: {paid.status}"]}

    def settle_sync(state: SettleState) -> dict[str, Any]:
        runs.add("enter settle")
        drafted = step_sync("draft", draft, {"order_id": state["order_id"]})
        answer = ask_sync("refund", {"order_id": state["order_id"], "amount": 120})
        if answer.status is not CallStatus.SUCCEEDED:
            return {"notes": [drafted.result, f"skipped: {answer.status}"]}
        paid = step_sync("pay", pay, answer.result)
        return {"notes": [drafted.result, paid.result or f"not paid: {paid.status}"]}

    node = settle_async if kind == "async" else settle_sync
    graph = StateGraph(SettleState)
    graph.add_node("settle", one_use(node, signoff))
    graph.add_edge(START, "settle")
    graph.add_edge("settle", END)
    return graph.compile(checkpointer=saver)


def two_questions_graph(
    runs: Runs, signoff: SignoffTools, saver: BaseCheckpointSaver[Any]
) -> Graph:
    """A `one_use` node asking two questions in turn (refund, then discount)."""

    async def offer(state: SettleState) -> dict[str, Any]:
        runs.add("enter offer")
        refunded = await ask("refund", {"order_id": state["order_id"], "amount": 120})
        discounted = await ask("discount", {"order_id": state["order_id"], "percent": 10})
        return {"notes": [str(refunded.status), str(discounted.status)]}

    graph = StateGraph(SettleState)
    graph.add_node("offer", one_use(offer, signoff))
    graph.add_edge(START, "offer")
    graph.add_edge("offer", END)
    return graph.compile(checkpointer=saver)


def build(
    name: str,
    runs: Runs,
    signoff: SignoffTools,
    saver: BaseCheckpointSaver[Any],
    sleep: float = 0.0,
) -> Graph:
    """The graph called `name`: "fan-out", "settle-async", "settle-sync"."""
    if name == "fan-out":
        return fan_out_graph(runs, signoff, saver, sleep)
    return settle_graph(name.removeprefix("settle-"), runs, signoff, saver, sleep)
