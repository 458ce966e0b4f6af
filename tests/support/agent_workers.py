"""LangGraph agent programs the tests run as OS processes:
`python -m tests.support.agent_workers NAME ...`.

The KEK comes from SIGNOFF_KEK. Each program prints one JSON object as its last line (the
`resume` program prints "effect refund" first when told to announce, so a test can kill it
while the refund sleeps).

- `resume URL KIND SCRIPT APPROVAL_ID VALUE [--checkpoint ID] [--sleep S] [--lease S]`: find the
  thread that approval paused (from the config stored with it, not from the test), resume it
  with VALUE ("continue": whatever the store has decided; anything else: a signed token) and
  print the conversation, the refunds made so far and what raised, if anything did.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from typing import Any

from langgraph.types import Command

from adapters.langgraph import resume_config
from ledger.errors import SignoffError
from ledger.log import configure_logging

from .agents import Effects, Kind, effects_of, open_harness, summary


async def resume(args: argparse.Namespace) -> dict[str, Any]:
    async with open_harness(args.url, lease_seconds=args.lease) as harness:
        approval = await harness.store.get(args.approval_id)
        config = resume_config(approval)
        if args.checkpoint:
            config["configurable"]["checkpoint_id"] = args.checkpoint
        effects = Effects(harness.db, sleep=args.sleep, announce=args.sleep > 0)
        graph, model = harness.agent(Kind(args.kind), args.script, effects)
        result: dict[str, Any] = {"pid": os.getpid(), "thread_id": approval.thread_id}
        try:
            out = await graph.ainvoke(Command(resume=args.value), config)
        except SignoffError as e:
            result["raised"] = {"type": type(e).__name__, "message": str(e)}
        else:
            result["messages"] = summary(out["messages"])
            result["paused"] = bool(out.get("__interrupt__"))
            result["model_saw"] = summary(model.seen[-1]) if model.seen else []
        thread_id = str(approval.thread_id)
        result["refunds"] = len(await effects_of(harness.db, thread_id, "refund"))
        return result


def main() -> None:
    configure_logging("WARNING")
    parser = argparse.ArgumentParser(prog="python -m tests.support.agent_workers")
    programs = parser.add_subparsers(dest="program", required=True)
    program = programs.add_parser("resume")
    program.add_argument("url")
    program.add_argument("kind", choices=[k.value for k in Kind])
    program.add_argument("script")
    program.add_argument("approval_id")
    program.add_argument("value")
    program.add_argument("--checkpoint", help="resume from this checkpoint (a replay)")
    program.add_argument("--sleep", type=float, default=0.0, help="refunds sleep this long")
    program.add_argument("--lease", type=float, default=30.0, help="the ledger's lease")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(resume(args))), flush=True)


if __name__ == "__main__":
    main()
