"""One worker process of `signoff demo`: `python -m adapters.demo.worker start RUN PAYMENTS`
runs the support agent until it pauses for an approval; `... resume APPROVAL PAYMENTS` finds the
thread stored with the approval and resumes it (the decision comes from the store). The refund
pays into the file PAYMENTS.

The database and the KEK come from the environment's settings (`SIGNOFF_DATABASE_URL`,
`SIGNOFF_KEK` / `SIGNOFF_KEK_FILE`, else the embedded server and its local KEK file), as for every
command; `signoff demo` gives its workers a login that has only `signoff_app`.
Progress goes to stdout, one JSON object per line (see `emit`), for `signoff demo` to show.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import traceback
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.types import Command

from adapters.langgraph import (
    EncryptedPostgresSaver,
    SignoffTools,
    encrypted_checkpointer,
    resume_config,
)
from approvals import ApprovalStore
from ledger import SignoffError
from ledger.calls.service import ToolLedger
from ledger.keys import KeyRing
from ledger.log import configure_logging
from ledger.store import Database
from ledger.store.settings import Settings

from .agent import SPECS, build_agent
from .script import CUSTOMER_MESSAGE

__all__ = ["emit", "main"]


def emit(event: str, **data: Any) -> None:
    """One progress record on stdout: `{"event": ..., "pid": ..., **data}`."""
    print(json.dumps({"event": event, "pid": os.getpid(), **data}, default=str), flush=True)


@asynccontextmanager
async def _session() -> AsyncIterator[tuple[SignoffTools, EncryptedPostgresSaver]]:
    """Signoff on the environment's database, and the encrypted checkpointer."""
    # `signoff demo` sets SIGNOFF_DATABASE_URL, or SIGNOFF_EMBEDDED_DIR for its embedded server.
    async with await Database.from_settings(Settings.from_env(), pool_size=4) as db:
        async with db.connection() as conn:  # who the database says this process is
            emit("login", user=await conn.fetchval("SELECT session_user"))
        ring = await KeyRing.open(db)
        store = ApprovalStore(db, ring)
        ledger = ToolLedger(db, ring)
        try:
            async with (
                encrypted_checkpointer(db, ring, max_size=4) as checkpointer,
                SignoffTools(ledger, store, SPECS, requested_by="support-agent") as tools,
            ):
                yield tools, checkpointer
        finally:
            await ledger.close()
            await store.close()


async def _run(agent: Any, inputs: Any, config: RunnableConfig) -> None:
    """Stream the graph's updates and report the messages and pauses they carry."""
    async for chunk in agent.astream(inputs, config, stream_mode="updates"):
        if (chunk.get("__metadata__") or {}).get("cached"):
            continue  # writes replayed from the checkpoint: reported by the process that made them
        for node, update in chunk.items():
            if node == "__interrupt__":
                for pause in update:
                    emit("paused", **pause.value)
            elif isinstance(update, dict):
                for message in update.get("messages") or []:
                    _report(message)


def _report(message: Any) -> None:
    if isinstance(message, AIMessage):
        for call in message.tool_calls:
            emit("asks", tool=call["name"], args=call["args"], call_id=call["id"])
        if message.content:
            emit("says", text=message.content)
    elif isinstance(message, ToolMessage):
        emit("tool", tool=message.name, status=message.status, content=message.content)


async def start(run_id: str, payments: Path) -> None:
    async with _session() as (signoff, cp):
        agent = build_agent(signoff, cp, payments)
        emit("customer", text=CUSTOMER_MESSAGE)
        config: RunnableConfig = {"configurable": {"thread_id": run_id}}
        await _run(agent, {"messages": [HumanMessage(CUSTOMER_MESSAGE)]}, config)


async def resume(approval_id: str, payments: Path) -> None:
    async with _session() as (signoff, cp):
        approval = await signoff.approvals.get(approval_id)
        config = resume_config(approval)  # the thread the approval paused
        agent = build_agent(signoff, cp, payments)
        state = await agent.aget_state(config)
        if not state.interrupts:
            raise SignoffError(f"thread {approval.thread_id} is not waiting for an approval")
        emit("resumes", thread_id=approval.thread_id, status=str(approval.status))
        # Store-decided: resume every pause with nothing; the decision comes from the store.
        await _run(agent, Command(resume={i.id: None for i in state.interrupts}), config)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m adapters.demo.worker")
    parser.add_argument("--log-level", default="WARNING")
    commands = parser.add_subparsers(dest="command", required=True)
    for command, subject in (("start", "run_id"), ("resume", "approval_id")):
        sub = commands.add_parser(command)
        sub.add_argument(subject)
        sub.add_argument("payments", type=Path, help="the file the refund pays into")
    args = parser.parse_args(argv)
    configure_logging(args.log_level.upper())
    try:
        if args.command == "start":
            asyncio.run(start(args.run_id, args.payments))
        else:
            asyncio.run(resume(args.approval_id, args.payments))
    except SignoffError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # the demo shows the last line: keep it one line that says what
        if args.log_level.upper() == "DEBUG":
            traceback.print_exc()
        print(f"error: unexpected {type(e).__name__}: {e}".replace("\n", " "), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
