"""The Welt agent the tests run, and the programs that answer or resume it as separate OS
processes: `python -m tests.support.welt_workers NAME ARGS...` (KEK from `SIGNOFF_KEK`; each program
prints one JSON object).

- `ScriptedModel`: a chat model with no API key; reply n when the conversation holds n AI
  messages, so a resumed run gets the same reply in any process.
- `refund` records every real run in the table `welt_tool_runs` (committed at once), so any
  process can count how often it ran.
- Programs: `deliver URL PAYLOAD_FILE USER_ID` answers and resumes, as a Welt entrypoint would;
  `answer URL PAYLOAD_FILE USER_ID` only records; `resume URL APPROVAL_ID...` only resumes.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Collection, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, tool

from adapters.demo.model import ScriptedChatModel
from adapters.langgraph import (
    EncryptedPostgresSaver,
    SignoffMiddleware,
    SignoffTools,
    ToolSpec,
    encrypted_checkpointer,
)
from adapters.welt import WeltAgent
from approvals import ApprovalPolicy, ApprovalStore, DecisionKind
from ledger.calls.model import Effect
from ledger.calls.service import ToolLedger
from ledger.keys import Kek, KeyRing
from ledger.log import configure_logging
from ledger.store import Database


def refund_call(call_id: str = "call-refund-1", amount: int = 120) -> AIMessage:
    return AIMessage(
        content="",
        tool_calls=[
            {
                "id": call_id,
                "name": "refund",
                "args": {"order_id": "A7", "amount": amount},
                "type": "tool_call",
            }
        ],
    )


SCRIPT = [refund_call(), AIMessage(content="Refunded 120 EUR on order A7.")]


ScriptedModel = ScriptedChatModel


RUNS_TABLE = """
CREATE TABLE IF NOT EXISTS welt_tool_runs (
    thread_id text NOT NULL,
    tool text NOT NULL,
    args text NOT NULL,
    pid int NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""


def build_tools(db: Database) -> list[BaseTool]:
    @tool
    async def refund(order_id: str, amount: int, config: RunnableConfig) -> str:
        """Refund money on an order."""
        thread_id = (config.get("configurable") or {}).get("thread_id")
        async with db.connection() as conn:
            await conn.execute(
                "INSERT INTO welt_tool_runs (thread_id, tool, args, pid) VALUES ($1, $2, $3, $4)",
                str(thread_id),
                "refund",
                json.dumps({"order_id": order_id, "amount": amount}),
                os.getpid(),
            )
        return f"refunded {amount} EUR on {order_id}"

    return [refund]


async def tool_runs(db: Database) -> list[dict[str, Any]]:
    """Every real run of a tool, oldest first."""
    async with db.connection() as conn:
        rows = await conn.fetch("SELECT thread_id, tool, args, pid FROM welt_tool_runs ORDER BY at")
    return [{**dict(r), "args": json.loads(r["args"])} for r in rows]


def specs(policy: ApprovalPolicy | None = None) -> tuple[ToolSpec, ...]:
    return (
        ToolSpec(
            "refund",
            effect=Effect.SINGLE_ATTEMPT,
            approval=policy or ApprovalPolicy(),
            description="Refund money to a customer",
        ),
    )


POLICIES: dict[str, ApprovalPolicy] = {
    "default": ApprovalPolicy(),
    "boss-only": ApprovalPolicy(approvers=frozenset({"slack:U0B055"})),
    "edit-only": ApprovalPolicy(allowed=frozenset({DecisionKind.EDIT})),
}


@dataclass
class WeltHarness:
    db: Database
    ring: KeyRing
    store: ApprovalStore
    ledger: ToolLedger
    saver: EncryptedPostgresSaver

    def welt(
        self,
        script: list[AIMessage] | None = None,
        policy: ApprovalPolicy | None = None,
        *,
        model: ScriptedModel | None = None,
        tools: list[BaseTool] | None = None,
        files_from: Collection[str] = (),
        through_signoff: bool = True,
    ) -> tuple[WeltAgent, ScriptedModel]:
        """The agent (its tools through Signoff unless `through_signoff` is false) and its
        model (`model`, else one scripted with `script`)."""
        model = model or ScriptedModel(script=list(script or SCRIPT))
        signoff = SignoffTools(self.ledger, self.store, specs(policy))
        graph = create_agent(
            model,
            tools=[*build_tools(self.db), *(tools or [])],
            middleware=[SignoffMiddleware(signoff)] if through_signoff else [],
            checkpointer=self.saver,
        )
        return WeltAgent(graph, self.store, files_from=files_from), model


@asynccontextmanager
async def opened(url: str, kek: Kek | None = None) -> AsyncIterator[WeltHarness]:
    """Everything a Welt agent process needs, on `url` (KEK default: SIGNOFF_KEK)."""
    async with await Database.connect(url, pool_size=4) as db:
        async with db.connection() as conn:
            await conn.execute(RUNS_TABLE)
        ring = await KeyRing.open(db, kek)
        store = ApprovalStore(db, ring, poll_interval=0.05)
        ledger = ToolLedger(db, ring, poll_interval=0.05)
        try:
            async with encrypted_checkpointer(db, ring, max_size=4) as saver:
                yield WeltHarness(db, ring, store, ledger, saver)
        finally:
            await ledger.close()
            await store.close()


def addressed(payload: Mapping[str, Any], *interrupt_ids: str) -> dict[str, Any]:
    """A recorded `interrupt_responses` payload, its answers addressed (in order) to these ids."""
    answers = list(payload["interrupt_responses"].values())
    return {"interrupt_responses": dict(zip(interrupt_ids, answers, strict=True))}


def report(**fields: Any) -> None:
    print(json.dumps({"pid": os.getpid(), **fields}, default=str), flush=True)


async def deliver(url: str, payload: Any, user_id: str, policy: str) -> None:
    """What a Welt entrypoint does with answers: record them, then resume, in this process."""
    async with opened(url) as h:
        welt, model = h.welt(policy=POLICIES[policy])
        outcomes = await welt.answer(payload, user_id=user_id)
        events = [e async for e in welt.resume(outcomes)]
        report(outcomes=[o.to_json() for o in outcomes], events=events, model_calls=len(model.seen))


async def answer(url: str, payload: Any, user_id: str, policy: str) -> None:
    """Record the answers only."""
    async with opened(url) as h:
        welt, _ = h.welt(policy=POLICIES[policy])
        outcomes = await welt.answer(payload, user_id=user_id)
        report(outcomes=[o.to_json() for o in outcomes])


async def resume(url: str, policy: str, approval_ids: list[str]) -> None:
    """Resume the threads of these approvals from the configs stored with them."""
    async with opened(url) as h:
        welt, model = h.welt(policy=POLICIES[policy])
        approvals = [await h.store.get(i) for i in approval_ids]
        events = [e async for e in welt.resume(approvals)]
        report(events=events, model_calls=len(model.seen))


def main() -> None:
    configure_logging("WARNING")
    name, *args = sys.argv[1:]
    if name in ("deliver", "answer"):
        url, payload_file, user_id, policy = args
        program = deliver if name == "deliver" else answer
        payload = json.loads(Path(payload_file).read_text())
        asyncio.run(program(url, payload, user_id, policy))
    elif name == "resume":
        url, policy, *approval_ids = args
        asyncio.run(resume(url, policy, approval_ids))
    else:
        raise SystemExit(f"unknown worker {name!r}")


if __name__ == "__main__":
    main()
