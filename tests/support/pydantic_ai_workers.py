"""A Pydantic AI agent through Signoff, run as OS processes: `python -m
tests.support.pydantic_ai_workers URL start SCRIPT RUN_ID [REQUESTER]` starts a run,
`... URL resume SCRIPT PAUSE_ID` goes on from a pause. The model is a `FunctionModel` whose
reply is picked by how many responses the history holds, so any process replays it the same.

The KEK comes from SIGNOFF_KEK. The tools record each run in `pyd_effects` (committed at once),
so any process can count how often a tool really ran; `hang` records that it started, then
waits to be killed. Prints one JSON object: the pause id and approvals it waits on, or the
output, and the tool results the model read last.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
from pydantic_ai import Agent, RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from adapters.pydantic_ai import PausedRuns, Signoff, SignoffRun, ToolSpec
from approvals import ApprovalPolicy, ApprovalStore
from ledger.calls.model import Effect
from ledger.calls.service import ToolLedger
from ledger.keys import KeyRing
from ledger.log import configure_logging
from ledger.store import Database

EFFECTS_TABLE = """
CREATE TABLE IF NOT EXISTS pyd_effects (
    run_id text NOT NULL,
    tool text NOT NULL,
    args text NOT NULL,
    pid int NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""

REFUND = {"order_id": "A7", "amount": 120}
Call = tuple[str, str, dict[str, Any]]

SCRIPTS: dict[str, list[list[Call]]] = {
    "refund": [[("c-1", "refund", REFUND)]],
    "two": [[("c-1", "refund", REFUND), ("c-2", "lookup", {"order_id": "A7"})]],
    "repeat": [[("dup", "refund", REFUND), ("dup", "refund", {"order_id": "B9", "amount": 5})]],
    "hang": [[("h-1", "hang", {"order_id": "A7"})]],
    "asks_twice": [
        [("c-1", "refund", REFUND)],
        [("c-2", "refund", {"order_id": "B9", "amount": 5})],
    ],
    "reuses_id": [
        [("c-1", "refund", REFUND)],
        [("c-1", "refund", {"order_id": "B9", "amount": 5})],
    ],
}
"""Each script: the tool calls of each model response in turn; then the model answers text."""

SPECS = [
    ToolSpec("refund", Effect.SINGLE_ATTEMPT, ApprovalPolicy()),
    ToolSpec("hang", Effect.SINGLE_ATTEMPT),
    ToolSpec("lookup", Effect.READ),
]


def scripted(script: str) -> FunctionModel:
    turns = SCRIPTS[script]

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = sum(1 for m in messages if isinstance(m, ModelResponse))
        if done < len(turns):
            return ModelResponse(parts=[ToolCallPart(n, a, i) for i, n, a in turns[done]])
        return ModelResponse(parts=[TextPart(f"done: {len(tool_results(messages))} results")])

    return FunctionModel(reply)


def tool_results(messages: list[ModelMessage]) -> dict[str, str]:
    """Each tool result the history holds (call id -> content as text)."""
    return {
        p.tool_call_id: str(p.content)
        for m in messages
        if isinstance(m, ModelRequest)
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    }


def build_agent(url: str, capabilities: Sequence[AbstractCapability[str]] = ()) -> Agent[str, str]:
    """An ordinary Pydantic AI agent (its deps: the run id the effects are filed under), with
    `capabilities` when given."""
    agent: Agent[str, str] = Agent(deps_type=str, capabilities=list(capabilities) or None)

    async def record(run_id: str, tool: str, args: dict[str, Any]) -> None:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute(
                "INSERT INTO pyd_effects (run_id, tool, args, pid) VALUES ($1, $2, $3, $4)",
                run_id, tool, json.dumps(args, sort_keys=True), os.getpid(),
            )  # fmt: skip
        finally:
            await conn.close()

    @agent.tool
    async def refund(ctx: RunContext[str], order_id: str, amount: int) -> str:
        """Refund an order."""
        await record(ctx.deps, "refund", {"order_id": order_id, "amount": amount})
        return f"refunded {amount} on {order_id}"

    @agent.tool
    async def lookup(ctx: RunContext[str], order_id: str) -> dict[str, str]:
        """Look an order up."""
        await record(ctx.deps, "lookup", {"order_id": order_id})
        return {"order_id": order_id, "status": "delivered"}

    @agent.tool
    async def hang(ctx: RunContext[str], order_id: str) -> str:
        """Start something that never ends."""
        await record(ctx.deps, "hang", {"order_id": order_id})
        await asyncio.Event().wait()
        return "never"

    return agent


@asynccontextmanager
async def opened(url: str, lease: float = 30.0) -> AsyncIterator[Signoff]:
    async with await Database.connect(url) as db:
        ring = await KeyRing.open(db)
        store = ApprovalStore(db, ring, poll_interval=0.05)
        ledger = ToolLedger(db, ring, lease_seconds=lease, poll_interval=0.05)
        try:
            async with Signoff(ledger, store, PausedRuns(db, ring), SPECS) as signoff:
                yield signoff
        finally:
            await ledger.close()
            await store.close()


def report(ended: SignoffRun) -> dict[str, Any]:
    return {
        "pid": os.getpid(),
        "run_id": ended.run_id,
        "pause_id": ended.pause_id,
        "waiting": list(ended.waiting),
        "output": ended.output,
        "results": tool_results(ended.result.all_messages()),
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    async with opened(args.url, args.lease) as signoff:
        agent = build_agent(args.url)
        model = scripted(args.script)
        if args.action == "start":
            ended = await signoff.run(
                agent, "Refund order A7.", run_id=args.target, requested_by=args.requester,
                deps=args.target, model=model,
            )  # fmt: skip
        else:
            run_id = args.run_id or ""
            ended = await signoff.resume(agent, args.target, deps=run_id, model=model)
        return report(ended)


def main() -> None:
    configure_logging("WARNING")
    parser = argparse.ArgumentParser(prog="python -m tests.support.pydantic_ai_workers")
    parser.add_argument("url")
    parser.add_argument("action", choices=["start", "resume"])
    parser.add_argument("script", choices=list(SCRIPTS))
    parser.add_argument("target", help="the run id (start) or the pause id (resume)")
    parser.add_argument("--requester", default="ann")
    parser.add_argument("--run-id", help="resume: the run id the effects are filed under")
    parser.add_argument("--lease", type=float, default=30.0)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main_async(args)), default=str), flush=True)


if __name__ == "__main__":
    main()
