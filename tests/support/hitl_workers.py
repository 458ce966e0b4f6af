"""LangChain's documented human-in-the-loop example, run as OS processes with `SignoffMiddleware`
in place of `HumanInTheLoopMiddleware`: `python -m tests.support.hitl_workers URL MODE SHAPE SCRIPT
THREAD [RESUME_JSON] [--store-only] [--policy-approvers]`.

MODE is `sync` (`agent.invoke`, both stores on loops of their own through `from_conn_string_sync`)
or `async` (`agent.ainvoke`). Without RESUME_JSON the run starts; with it, the thread is resumed
with `Command(resume=<that JSON>)`. The KEK comes from SIGNOFF_KEK; an agent worker runs it on a
login with only `signoff_app` and no reviewer KEK. The program prints one JSON
object: the pending interrupts (id and value), the conversation and what the model last read.
The tools record each run in `hitl_effects` (committed at once), so any process can count them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections.abc import Sequence
from typing import Any

import psycopg
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.types import Command

from adapters.demo.model import ScriptedChatModel
from adapters.langgraph import EncryptedPostgresSaver, SignoffMiddleware, SignoffTools, ToolSpec
from adapters.langgraph.middleware import Shape
from approvals import ApprovalPolicy
from ledger.log import configure_logging

from .agents import Graph, calls, open_harness, summary

EFFECTS_TABLE = """
CREATE TABLE IF NOT EXISTS hitl_effects (
    thread_id text NOT NULL,
    tool text NOT NULL,
    args text NOT NULL,
    pid int NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""

SCRIPTS: dict[str, list[AIMessage]] = {
    "write": [
        calls(("w-1", "write_file", {"path": "report.txt", "content": "Q3 numbers"})),
        AIMessage(content="The file is written."),
    ],
    "sql": [
        calls(("s-1", "execute_sql", {"query": "DELETE FROM records WHERE old"})),
        AIMessage(content="The query ran."),
    ],
    "two": [
        calls(
            ("t-1", "write_file", {"path": "report.txt", "content": "Q3 numbers"}),
            ("t-2", "execute_sql", {"query": "DELETE FROM records WHERE old"}),
            ("t-3", "read_data", {"table": "records"}),
        ),
        AIMessage(content="Done with all three."),
    ],
}


def build_tools(url: str) -> list[BaseTool]:
    """The example's three tools (sync, as in LangChain's docs), each recording its run."""

    def record(name: str, args: dict[str, Any], config: RunnableConfig) -> None:
        thread_id = (config.get("configurable") or {}).get("thread_id")
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO hitl_effects (thread_id, tool, args, pid) VALUES (%s, %s, %s, %s)",
                (str(thread_id), name, json.dumps(args, sort_keys=True), os.getpid()),
            )

    @tool
    def write_file(path: str, content: str, config: RunnableConfig) -> str:
        """Write a file."""
        record("write_file", {"path": path, "content": content}, config)
        return f"wrote {len(content)} characters to {path}"

    @tool
    def execute_sql(query: str, config: RunnableConfig) -> str:
        """Execute a SQL query."""
        record("execute_sql", {"query": query}, config)
        return "3 rows affected"

    @tool
    def read_data(table: str, config: RunnableConfig) -> str:
        """Read data."""
        record("read_data", {"table": table}, config)
        return f"{table}: 3 rows"

    return [write_file, execute_sql, read_data]


def documented_agent(
    model: ScriptedChatModel,
    tools: Sequence[BaseTool],
    saver: BaseCheckpointSaver[Any],
    signoff: SignoffTools,
    shape: Shape,
    store_only: bool | None,
) -> Graph:
    """LangChain's example; only the import and the middleware's constructor differ (it was
    `HumanInTheLoopMiddleware(interrupt_on=..., description_prefix=...)`)."""
    return create_agent(
        model,
        tools=list(tools),
        middleware=[
            SignoffMiddleware(
                signoff,
                interrupt_on={
                    "write_file": True,  # all decisions (approve, edit, reject, respond)
                    "execute_sql": {"allowed_decisions": ["approve", "reject"]},  # no edits
                    "read_data": False,  # safe: no approval
                },
                description_prefix="Tool execution pending approval",
                shape=shape,
                store_only=store_only,
            ),
        ],
        checkpointer=saver,
    )


def specs(store_only_by_policy: bool) -> list[ToolSpec]:
    """With `store_only_by_policy`, write_file's policy names its approver (alice), which
    makes the store the only one to decide it."""
    if not store_only_by_policy:
        return []
    return [ToolSpec("write_file", approval=ApprovalPolicy(approvers=frozenset({"alice"})))]


def config_of(args: argparse.Namespace) -> RunnableConfig:
    return {"configurable": {"thread_id": args.thread}}


def inputs(args: argparse.Namespace) -> Any:
    if args.resume is None:
        return {"messages": [{"role": "user", "content": "Write the report, clean the table."}]}
    return Command(resume=json.loads(args.resume))


def report(out: Any, model: ScriptedChatModel) -> dict[str, Any]:
    seen: list[BaseMessage] = model.seen[-1] if model.seen else []
    return {
        "pid": os.getpid(),
        "interrupts": [{"id": i.id, "value": i.value} for i in out.interrupts],
        "messages": summary(out.value["messages"]),
        "model_saw": summary(seen),
    }


def run_sync(args: argparse.Namespace) -> dict[str, Any]:
    model = ScriptedChatModel(script=SCRIPTS[args.script])
    with (
        EncryptedPostgresSaver.from_conn_string_sync(args.url) as saver,
        SignoffTools.from_conn_string_sync(args.url, specs=specs(args.policy_approvers)) as tools,
    ):
        agent = documented_agent(
            model, build_tools(args.url), saver, tools, args.shape, args.store_only
        )
        out = agent.invoke(inputs(args), config_of(args), version="v2")
        return report(out, model)


async def run_async(args: argparse.Namespace) -> dict[str, Any]:
    model = ScriptedChatModel(script=SCRIPTS[args.script])
    async with open_harness(args.url) as harness:
        tools = SignoffTools(harness.ledger, harness.store, specs(args.policy_approvers))
        agent = documented_agent(
            model, build_tools(args.url), harness.saver, tools, args.shape, args.store_only
        )
        out = await agent.ainvoke(inputs(args), config_of(args), version="v2")
        return report(out, model)


def main() -> None:
    configure_logging("WARNING")
    parser = argparse.ArgumentParser(prog="python -m tests.support.hitl_workers")
    parser.add_argument("url")
    parser.add_argument("mode", choices=["sync", "async"])
    parser.add_argument("shape", choices=["batched", "per_call"])
    parser.add_argument("script", choices=list(SCRIPTS))
    parser.add_argument("thread")
    parser.add_argument("resume", nargs="?", help="the resume value, as JSON")
    parser.add_argument("--store-only", action="store_true", default=None)
    parser.add_argument("--policy-approvers", action="store_true", help="write_file: alice only")
    args = parser.parse_args()
    result = run_sync(args) if args.mode == "sync" else asyncio.run(run_async(args))
    print(json.dumps(result, default=str), flush=True)


if __name__ == "__main__":
    main()
