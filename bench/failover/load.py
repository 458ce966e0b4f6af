"""The harness's load, as OS processes on the cluster's multi-host URL:
`python -m bench.failover.load worker|decider ...`.

A worker (a login with only `signoff_app`, SIGNOFF_KEK only) runs `--flows` loops of tool
calls through `ToolLedger.execute`, each a single-attempt write; one call in `--approval-every`
first requests an approval, waits for it (LISTEN/NOTIFY) and consumes it in the call's intent
transaction; every fourth call of a flow also writes a LangGraph checkpoint (psycopg, same
URL). It writes, as JSON lines, to `<out>/<name>.acks` what the library acknowledged (each
call's outcome, each checkpoint, each wait for a decision) and each `DatabaseUnavailable` it
met; the tool appends one line per run to `<out>/<name>.effects`, outside the database, so a
call run twice shows there whatever the database keeps. A call that met `DatabaseUnavailable`
is tried again as an application would: the same call id, after a pause. Any other error ends
the process (its traceback on stderr is a finding), except `HistoryLost` (the database no
longer holds what the process saw committed), which ends that flow, noted as `refused`.

The decider is a reviewer's client of two `signoff serve` replicas (SIGNOFF_FAILOVER_TOKEN):
it lists what it may decide and approves it, `Idempotency-Key` = the approval id, turning to
the other replica when one fails; `<out>/decider.acks` records each decision the service
acknowledged.

Both print `ready` once working and stop when their stdin closes (a worker first finishes
the call each flow has in hand).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any, TextIO

import httpx
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint

from adapters.langgraph import EncryptedPostgresSaver, encrypted_checkpointer
from adapters.runtime.spec import task_run_id
from approvals import ApprovalPolicy, ApprovalStore, approval_gate
from ledger.calls.model import CallContext, Effect, ToolCall, ToolPolicy
from ledger.calls.service import ToolLedger
from ledger.errors import DatabaseUnavailable, HistoryLost, SignoffError
from ledger.keys import KeyRing
from ledger.log import configure_logging
from ledger.store import Database

REVIEWER = "failover-reviewer"
POLICY = ToolPolicy(Effect.SINGLE_ATTEMPT)
PAUSE = 0.2  # between two tries of a call that met DatabaseUnavailable


def appending(path: Path) -> TextIO:
    """`path` open for appending, for the life of the process (its end closes it)."""
    return open(path, "a")


class Log:
    """JSON lines, flushed at once (the harness reads them after the run)."""

    def __init__(self, path: Path) -> None:
        self.file = appending(path)

    def __call__(self, kind: str, **fields: Any) -> None:
        self.file.write(json.dumps({"t": time.time(), "kind": kind, **fields}) + "\n")
        self.file.flush()


async def stdin_closed() -> None:
    await asyncio.to_thread(sys.stdin.read)


# -- a worker --------------------------------------------------------------------------------


class Flow:
    """One loop of calls of its own run, until `stop` is set."""

    def __init__(
        self,
        name: str,
        db: Database,
        ledger: ToolLedger,
        store: ApprovalStore,
        saver: EncryptedPostgresSaver,
        acks: Log,
        effects: TextIO,
        approval_every: int,
    ) -> None:
        self.run_id = f"failover-{name}"
        self.db, self.ledger, self.store, self.saver = db, ledger, store, saver
        self.acks, self.effects = acks, effects
        self.approval_every = approval_every

    async def tool(self, args: dict[str, Any], context: CallContext) -> dict[str, Any]:
        self.effects.write(f"{self.run_id} {context.call_id} {os.getpid()} {context.attempt}\n")
        self.effects.flush()
        return {"refunded": args["n"]}

    async def loop(self, stop: asyncio.Event) -> None:
        n = 0
        try:
            while not stop.is_set():
                await self.again(partial(self.call, n))
                if n % 4 == 3:
                    await self.again(partial(self.checkpoint, n))
                n += 1
        except HistoryLost as e:  # the database lost what we saw committed: stop, as told
            self.acks("refused", run=self.run_id, call=f"c{n}", missing=e.missing[:5])

    async def again(self, step: Callable[[], Awaitable[None]]) -> None:
        """`step()` until it returns: a lost database is met by trying again, as an
        application would; each time is noted."""
        while True:
            try:
                await step()
                return
            except DatabaseUnavailable as e:
                self.acks("unavailable", run=self.run_id, error=e.reason[:200])
                await asyncio.sleep(PAUSE)

    async def call(self, n: int) -> None:
        call = ToolCall(self.run_id, f"c{n}", "refund", {"n": n})
        approval_id = None
        gate = None
        if self.approval_every and n % self.approval_every == 0:
            approval = await self.store.request(
                run_id=call.run_id,
                tool=call.tool,
                args=call.args,
                call_id=call.call_id,
                requested_by="failover-agent",
                policy=ApprovalPolicy(approvers=frozenset({REVIEWER})),
            )
            approval_id = approval.approval_id
            started = time.time()
            decided = await self.store.wait(approval_id, 300)
            if not decided.status.runs_tool:
                raise RuntimeError(f"approval {approval_id} not approved: {decided.status}")
            self.acks("waited", approval=approval_id, since=started)
            consumer = task_run_id(call.run_id, call.call_id)
            gate = approval_gate(self.store, approval_id, consumer, call.args)
        outcome = await self.ledger.execute(call, self.tool, POLICY, gate=gate)
        self.acks(
            "call",
            run=call.run_id,
            call=call.call_id,
            status=str(outcome.status),
            replayed=outcome.replayed,
            approval=approval_id,
        )

    async def checkpoint(self, n: int) -> None:
        config: RunnableConfig = {"configurable": {"thread_id": self.run_id, "checkpoint_ns": ""}}
        checkpoint = empty_checkpoint()
        stored = await self.saver.aput(config, checkpoint, {"step": n}, {})
        self.acks("checkpoint", thread=self.run_id, id=stored["configurable"]["checkpoint_id"])


async def worker(url: str, name: str, flows: int, approval_every: int, out: Path) -> None:
    acks = Log(out / f"{name}.acks")
    effects = appending(out / f"{name}.effects")
    async with await Database.connect(url, pool_size=flows + 2) as db:
        ring = await KeyRing.open(db)  # SIGNOFF_KEK only: a worker holds no reviewer key
        ledger, store = ToolLedger(db, ring), ApprovalStore(db, ring)
        async with encrypted_checkpointer(db, ring, max_size=flows) as saver:
            stop = asyncio.Event()
            loops = [
                Flow(f"{name}-{i}", db, ledger, store, saver, acks, effects, approval_every)
                for i in range(flows)
            ]
            tasks = [asyncio.create_task(flow.loop(stop)) for flow in loops]
            print("ready", flush=True)
            closed = asyncio.create_task(stdin_closed())
            await asyncio.wait([closed, *tasks], return_when=asyncio.FIRST_COMPLETED)
            stop.set()
            await asyncio.gather(*tasks)  # an error of a flow ends the process with it
        await ledger.close()
        await store.close()


async def again(url: str, run_id: str, call_id: str, n: int, out: Path) -> None:
    """Execute one call of a flow again, as a new process would (a LangGraph run resumed from
    an older checkpoint asks for the same call id): print its outcome, or the error."""
    async with await Database.connect(url, pool_size=2) as db:
        ledger = ToolLedger(db, await KeyRing.open(db))
        effects = appending(out / "again.effects")

        async def tool(args: dict[str, Any], context: CallContext) -> dict[str, Any]:
            effects.write(f"{run_id} {call_id} {os.getpid()} {context.attempt}\n")
            effects.flush()
            return {"refunded": args["n"]}

        try:
            outcome = await ledger.execute(ToolCall(run_id, call_id, "refund", {"n": n}), tool)
            print(json.dumps({"status": str(outcome.status), "replayed": outcome.replayed}))
        except SignoffError as e:
            print(json.dumps({"refused": type(e).__name__, "error": str(e)}))
        finally:
            await ledger.close()


# -- the decider -----------------------------------------------------------------------------


async def decider(replicas: list[str], out: Path) -> None:
    acks = Log(out / "decider.acks")
    headers = {"Authorization": f"Bearer {os.environ['SIGNOFF_FAILOVER_TOKEN']}"}
    closed = asyncio.create_task(stdin_closed())
    turn = 0
    print("ready", flush=True)
    async with httpx.AsyncClient(timeout=10, headers=headers) as client:
        while not closed.done():
            base = replicas[turn % len(replicas)]
            try:
                page = await client.get(f"{base}/v1/approvals", params={"limit": "200"})
                page.raise_for_status()
                pending = [a["approval_id"] for a in page.json()["approvals"]]
                for approval_id in pending:
                    answer = await client.post(
                        f"{base}/v1/approvals/{approval_id}/decision",
                        json={"decision": "approve"},
                        headers={"Idempotency-Key": approval_id},
                    )
                    if answer.status_code == 409:  # decided meanwhile (a retry's first try)
                        continue
                    answer.raise_for_status()
                    acks("decided", approval=approval_id, replica=base)
                if not pending:
                    await asyncio.sleep(0.05)
            except (httpx.TransportError, httpx.HTTPStatusError) as e:
                status = getattr(getattr(e, "response", None), "status_code", None)
                acks("unavailable", replica=base, status=status, error=type(e).__name__)
                turn += 1  # the other replica
                await asyncio.sleep(PAUSE)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("program", choices=("worker", "decider", "again"))
    parser.add_argument("--url", help="the database (worker)")
    parser.add_argument("--name", default="w0")
    parser.add_argument("--flows", type=int, default=4)
    parser.add_argument("--approval-every", type=int, default=3)
    parser.add_argument("--replica", action="append", default=[], help="a serve URL (decider)")
    parser.add_argument("--run", help="the run of the call to execute again (again)")
    parser.add_argument("--call", help="its call id (again)")
    parser.add_argument("--n", type=int, default=0, help="its argument (again)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    configure_logging("WARNING")
    if args.program == "worker":
        asyncio.run(worker(args.url, args.name, args.flows, args.approval_every, args.out))
    elif args.program == "again":
        asyncio.run(again(args.url, args.run, args.call, args.n, args.out))
    else:
        asyncio.run(decider(args.replica, args.out))


if __name__ == "__main__":
    main()
