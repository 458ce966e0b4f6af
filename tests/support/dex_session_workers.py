"""Dex agent-session programs the tests run as OS processes:
`python -m tests.support.dex_session_workers ...`. Each opens the database named on its command
line (KEK from SIGNOFF_KEK), builds the session Flow as a Worker would, and runs one Step through
the SDK's dispatcher:

- `run-model URL SESSION TURN CHECKPOINT SLOW`: the RunModel Step of `TURN`, from the checkpoint
  its input names. The model records each call in `dex_model_calls` (committed at once), prints
  `model`, and with SLOW=`yes` then sleeps.
- `call URL SESSION CALL CHECKPOINT`: the CallTool Step of a single-attempt refund; the tool
  records its effect, prints `effect refund`, then sleeps.

Each prints one JSON line: the Step types the Step moved to.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from dex import BlobCacheConfig, open_blob_cache
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from adapters.dex import ToolCallRequest
from adapters.dex.sessions import AgentSession, AgentSessionFlow, TurnStep
from adapters.langgraph import ToolSpec
from ledger.calls.model import Effect
from ledger.log import configure_logging
from ledger.store import Database

from .agents import (
    SCRIPTS,
    Effects,
    Harness,
    Kind,
    ScriptedModel,
    build_agent,
    build_tools,
    open_harness,
)
from .dex_dispatch import SdkWorker

MODEL_CALLS = (
    "CREATE TABLE IF NOT EXISTS dex_model_calls (session_id text, turn int, pid int,"
    " at timestamptz DEFAULT clock_timestamp())"
)
SPECS = (ToolSpec("lookup_order", Effect.READ), ToolSpec("refund", Effect.SINGLE_ATTEMPT))


class RecordedModel(ScriptedModel):
    """The scripted model; each call is recorded (by the number of AI messages it was shown)
    before it answers, and with `slow` it then sleeps (a window to kill its process in)."""

    db: Any = None
    session_id: str = ""
    slow: float = 0.0

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        turn = sum(isinstance(m, AIMessage) for m in messages)
        async with self.db.connection() as conn:
            await conn.execute(
                "INSERT INTO dex_model_calls (session_id, turn, pid) VALUES ($1, $2, $3)",
                self.session_id,
                turn,
                os.getpid(),
            )
        print("model", flush=True)
        if self.slow:
            await asyncio.sleep(self.slow)
        self.seen.append(list(messages))
        message = self.reply(messages).model_copy(deep=True)
        return ChatResult(generations=[ChatGeneration(message=message)])


async def model_calls(db: Database, session_id: str) -> list[tuple[int, int]]:
    """(model turn, pid) of each recorded model call, oldest first."""
    async with db.connection() as conn:
        rows = await conn.fetch(
            "SELECT turn, pid FROM dex_model_calls WHERE session_id = $1 ORDER BY at",
            session_id,
        )
    return [(r["turn"], r["pid"]) for r in rows]


def session_flow(
    harness: Harness, session_id: str, script: str, *, slow: float = 0.0, sleep: float = 0.0
) -> tuple[AgentSessionFlow, RecordedModel]:
    """The session every process builds: create_agent with SignoffMiddleware."""
    model = RecordedModel(script=SCRIPTS[script], db=harness.db, session_id=session_id, slow=slow)
    effects = Effects(harness.db, sleep=sleep, announce=sleep > 0)
    signoff = harness.signoff(SPECS)
    graph = build_agent(Kind.BATCHED, model, build_tools(effects), signoff, harness.saver)
    return AgentSessionFlow(AgentSession(graph, harness.saver, signoff)), model


async def step(url: str, session_id: str, name: str, value: object, **options: Any) -> None:
    async with open_harness(url, lease_seconds=1.0) as harness:
        flow, _ = session_flow(harness, session_id, "read", **options)
        with TemporaryDirectory() as folder:
            cache = open_blob_cache(BlobCacheConfig(str(Path(folder) / "cache"), 1 << 20))
            try:
                done, _ = await SdkWorker(flow, cache).execute(name, session_id, value)
            finally:
                cache.close()
    print(json.dumps([m.step_type for m in done.step_decision.next_steps]), flush=True)


def main() -> None:
    configure_logging("WARNING")
    name, url, session_id, *args = sys.argv[1:]
    if name == "run-model":
        turn, checkpoint_id, slow = args
        value: object = TurnStep(int(turn), "carol", checkpoint_id=checkpoint_id)
        asyncio.run(step(url, session_id, "RunModel", value, slow=60.0 if slow == "yes" else 0))
    elif name == "call":
        call_id, checkpoint_id = args
        value = ToolCallRequest(call_id, "refund", {}, "1", "carol", checkpoint_id=checkpoint_id)
        asyncio.run(step(url, session_id, "CallTool", value, sleep=60.0))
    else:
        raise SystemExit(f"unknown program {name!r}")


if __name__ == "__main__":
    main()
