"""An OpenAI Agents SDK agent run through `SignoffAgents` as OS processes, and its scripted model:
`python -m tests.support.openai_agents_workers URL run RUN_ID SCRIPT` starts a run (it pauses
server-side), `... URL resume PAUSE_ID` resumes one. `--lease S` sets the pause's and the tool
calls' leases (a killed worker's lapse sooner); `--claim-for S` retries a resume while another
worker's lease on the pause runs.

The KEK comes from SIGNOFF_KEK; the tests run it on a login with only `signoff_app` and no
reviewer KEK. The program prints one JSON object (status `finished`, `paused` or `error`, the
tool outputs the model read, the pause and approval ids). The tools record each run in
`oai_effects` (committed at once), so any process can count them; `transfer` prints `in-tool`
and then hangs, for the test that kills its worker there.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
from agents import Agent, FunctionTool, ModelSettings, function_tool, set_tracing_disabled
from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.models.interface import Model, ModelTracing
from agents.testing import assistant_message, function_call
from agents.tool import Tool
from agents.tool_context import ToolContext
from agents.usage import Usage
from openai.types.responses.response_prompt_param import ResponsePromptParam

from adapters.openai_agents import Finished, Paused, SignoffAgents, ToolSpec
from approvals import ApprovalPolicy, ApprovalStore
from ledger.calls import Effect, ToolLedger
from ledger.errors import SignoffError
from ledger.keys import KeyRing
from ledger.log import configure_logging
from ledger.pauses import PausedRuns, PauseTaken
from ledger.store import Database

EFFECTS_TABLE = """
CREATE TABLE IF NOT EXISTS oai_effects (
    run_id text NOT NULL,
    call_id text NOT NULL,
    tool text NOT NULL,
    args text NOT NULL,
    pid int NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""

Call = tuple[str, dict[str, Any], str]

SCRIPTS: dict[str, list[Call]] = {
    "refund": [("refund", {"order": "A-1042", "amount": 120}, "r-1")],
    "two": [
        ("refund", {"order": "A-7", "amount": 80}, "r-7"),
        ("lookup", {"order": "A-7"}, "l-7"),
    ],
    "transfer": [("transfer", {"to": "ACME", "amount": 5000}, "t-1")],
}

SPECS = [
    ToolSpec("refund", Effect.SINGLE_ATTEMPT, ApprovalPolicy(approvers=frozenset({"alice"}))),
    ToolSpec("transfer", Effect.SINGLE_ATTEMPT, ApprovalPolicy(approvers=frozenset({"alice"}))),
    ToolSpec("lookup", Effect.READ),
]


class ScriptedCalls(Model):
    """The SDK's `Model` interface, scripted by the conversation: it asks for `calls` in one
    response until the input holds their outputs (then for each of `more` in turn, likewise),
    then answers with what the tools said. It keeps no state, so a run paused in one process
    goes on in another with a new instance."""

    def __init__(self, calls: Sequence[Call], *more: Sequence[Call]) -> None:
        self.rounds = [list(calls), *(list(m) for m in more)]
        self.responses = 0

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff[Any, Any]],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        self.responses += 1
        items = input if isinstance(input, list) else []
        outputs = tool_outputs(items)
        for calls in self.rounds:
            if not all(call_id in outputs for _, _, call_id in calls):
                asked = [
                    function_call(name, args, call_id=call_id) for name, args, call_id in calls
                ]
                return ModelResponse(output=asked, usage=Usage(), response_id=None)
        text = " | ".join(f"{k}: {v}" for k, v in sorted(outputs.items()))
        return ModelResponse(
            output=[assistant_message(f"Done. {text}")], usage=Usage(), response_id=None
        )

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("the scripted model does not stream")


def tool_outputs(items: Sequence[Any]) -> dict[str, str]:
    """The tool outputs among the input items, by call id."""
    return {
        str(i["call_id"]): str(i.get("output"))
        for i in items
        if isinstance(i, dict) and i.get("type") == "function_call_output"
    }


def build_tools(url: str) -> list[FunctionTool]:
    """refund, transfer (hangs after recording) and lookup, each recording its run."""

    async def record(ctx: ToolContext[Any], name: str, args: dict[str, Any]) -> None:
        run_id = (ctx.context or {}).get("run_id", "?") if isinstance(ctx.context, dict) else "?"
        conn = await asyncpg.connect(url)
        try:
            await conn.execute(
                "INSERT INTO oai_effects (run_id, call_id, tool, args, pid)"
                " VALUES ($1, $2, $3, $4, $5)",
                str(run_id),
                ctx.tool_call_id,
                name,
                json.dumps(args, sort_keys=True),
                os.getpid(),
            )
        finally:
            await conn.close()

    @function_tool(needs_approval=True)
    async def refund(ctx: ToolContext[Any], order: str, amount: int) -> str:
        """Refund an order."""
        await record(ctx, "refund", {"order": order, "amount": amount})
        return f"refunded {amount} on {order}"

    @function_tool(needs_approval=True)
    async def transfer(ctx: ToolContext[Any], to: str, amount: int) -> str:
        """Transfer money."""
        await record(ctx, "transfer", {"to": to, "amount": amount})
        print("in-tool", flush=True)
        await asyncio.Event().wait()  # killed here
        return "never"

    @function_tool
    async def lookup(ctx: ToolContext[Any], order: str) -> str:
        """Look an order up."""
        await record(ctx, "lookup", {"order": order})
        return f"{order}: shipped"

    return [refund, transfer, lookup]


def shop(url: str, script: str) -> Agent[Any]:
    return Agent(name="shop", tools=list(build_tools(url)), model=ScriptedCalls(SCRIPTS[script]))


@asynccontextmanager
async def signoff_agents(url: str, lease: float) -> AsyncIterator[SignoffAgents]:
    async with await Database.connect(url, pool_size=4) as db:
        ring = await KeyRing.open(db, create_missing=False)
        store = ApprovalStore(db, ring, poll_interval=0.05)
        ledger = ToolLedger(db, ring, lease_seconds=lease, poll_interval=0.05)
        pauses = PausedRuns(db, ring, lease_seconds=lease)
        try:
            async with SignoffAgents(ledger, store, pauses, SPECS) as signoff:
                yield signoff
        finally:
            await ledger.close()
            await store.close()


def report(done: Finished | Paused) -> dict[str, Any]:
    if isinstance(done, Paused):
        return {
            "pid": os.getpid(),
            "status": "paused",
            "pause_id": done.pause_id,
            "approval_ids": list(done.approval_ids),
        }
    items = done.result.to_input_list()
    return {
        "pid": os.getpid(),
        "status": "finished",
        "outputs": tool_outputs(items),
        "final": str(done.result.final_output),
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    set_tracing_disabled(True)
    async with signoff_agents(args.url, args.lease) as signoff:
        try:
            if args.command == "run":
                agent = shop(args.url, args.script)
                context = {"run_id": args.target}
                done = await signoff.run(
                    agent, "please", run_id=args.target, requested_by="dana", context=context
                )
                return report(done)
            agent = shop(args.url, args.script)
            deadline = time.monotonic() + args.claim_for
            while True:
                try:
                    return report(await signoff.resume(agent, args.target))
                except PauseTaken as e:
                    if e.status == "resumed" or time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.2)
        except SignoffError as e:
            return {
                "pid": os.getpid(),
                "status": "error",
                "error": type(e).__name__,
                "message": str(e),
            }


def cli() -> None:
    configure_logging("WARNING")
    parser = argparse.ArgumentParser(prog="python -m tests.support.openai_agents_workers")
    parser.add_argument("url")
    parser.add_argument("command", choices=["run", "resume"])
    parser.add_argument("target", help="the run id (run) or the pause id (resume)")
    parser.add_argument("--script", choices=list(SCRIPTS), default="refund")
    parser.add_argument("--lease", type=float, default=30.0)
    parser.add_argument("--claim-for", type=float, default=0.0)
    result = asyncio.run(main(parser.parse_args()))
    print(json.dumps(result, default=str), flush=True)
    sys.exit(0)


if __name__ == "__main__":
    cli()
