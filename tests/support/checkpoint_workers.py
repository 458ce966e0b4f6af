"""LangGraph programs the tests run as separate OS processes, through `tests.support.workers`
(`review`, `checkpoint-loop`). Apart from `tests.support.workers` so its other programs start
without importing LangGraph. The KEK comes from `SIGNOFF_KEK`; each program prints one JSON
object."""

from __future__ import annotations

import asyncio
import json
import operator
import os
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, interrupt

from adapters.langgraph import encrypted_checkpointer
from ledger.keys import KeyRing, Purpose
from ledger.store import Database


class ReviewState(TypedDict, total=False):
    note: str
    messages: Annotated[list[AnyMessage], add_messages]


def _draft(state: ReviewState) -> ReviewState:
    return {"note": "draft ready", "messages": [AIMessage(content="refund 120 EUR?")]}


def _review(state: ReviewState) -> ReviewState:
    answer = interrupt({"question": "approve the refund?", "pid": os.getpid()})
    return {"note": f"reviewed: {answer}", "messages": [HumanMessage(content=str(answer))]}


def review_graph(saver: BaseCheckpointSaver[Any]) -> CompiledStateGraph[Any, Any, Any, Any]:
    """draft -> review (interrupts for a person's answer) -> end."""
    graph = StateGraph(ReviewState)
    graph.add_node("draft", _draft)
    graph.add_node("review", _review)
    graph.add_edge(START, "draft")
    graph.add_edge("draft", "review")
    graph.add_edge("review", END)
    return graph.compile(checkpointer=saver)


async def review_step(url: str, thread_id: str, answer: str | None) -> None:
    """Start the review graph on `thread_id` (no answer: it stops at the interrupt) or resume it
    with `answer`, from this process; print what happened as JSON. The KEK is SIGNOFF_KEK's."""
    async with await Database.connect(url, pool_size=2) as db:
        ring = await KeyRing.open(db)
        async with encrypted_checkpointer(db, ring, max_size=2) as saver:
            graph = review_graph(saver)
            config: Any = {"configurable": {"thread_id": thread_id}}
            if answer is None:
                out = await graph.ainvoke({"messages": [HumanMessage(content="refund?")]}, config)
                result = {"interrupt": out["__interrupt__"][0].value}
            else:
                out = await graph.ainvoke(Command(resume=answer), config)
                result = {"note": out["note"], "messages": len(out["messages"])}
    print(json.dumps({"pid": os.getpid(), **result}))


class CounterState(TypedDict, total=False):
    count: int
    items: Annotated[list[str], operator.add]


def _count(state: CounterState) -> CounterState:
    return {"count": state.get("count", 0) + 1, "items": [f"item {state.get('count', 0)}"]}


async def checkpoint_loop(url: str, stop_file: str) -> None:
    """Write checkpoints (a small graph on five threads) until `stop_file` exists, at most 60 s;
    print the runs and the checkpoint key ids in use, in order, as JSON."""
    graph = StateGraph(CounterState)
    graph.add_node("count", _count)
    graph.add_edge(START, "count")
    graph.add_edge("count", END)
    runs = 0
    used: list[str] = []
    stop = Path(stop_file)
    deadline = time.monotonic() + 60
    async with await Database.connect(url, pool_size=2) as db:
        ring = await KeyRing.open(db)
        async with encrypted_checkpointer(db, ring, max_size=2) as saver:
            compiled = graph.compile(checkpointer=saver)
            while time.monotonic() < deadline and not await asyncio.to_thread(stop.exists):
                config: Any = {"configurable": {"thread_id": f"loop-{runs % 5}"}}
                await compiled.ainvoke({"items": []}, config)
                runs += 1
                key_id = ring.active_key_id(Purpose.CHECKPOINT)
                if not used or used[-1] != key_id:
                    used.append(key_id)
    print(json.dumps({"runs": runs, "key_ids": used}))


def run(name: str, args: list[str]) -> None:
    """Run the program `name` with its command-line `args`."""
    if name == "review":
        url, thread_id, *answer = args
        asyncio.run(review_step(url, thread_id, answer[0] if answer else None))
    elif name == "checkpoint-loop":
        url, stop_file = args
        asyncio.run(checkpoint_loop(url, stop_file))
    else:
        raise SystemExit(f"unknown worker {name!r}")
