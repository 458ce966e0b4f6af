"""Every ```python block of README.md and of the documentation's pages (docs/pages/**/*.md) runs
as written, against a database of its own, and does what the text says it does.

- Blocks are cut from the Markdown as they are, and run with top-level await; a traceback points
  at the page's own lines. Each runs in a fresh namespace on a fresh scratch database
  (migrated), with `SIGNOFF_DATABASE_URL` pointing at it and the session's KEK as `SIGNOFF_KEK`,
  so `Database.from_env()` and `KeyRing.open(db)` in a block open that database.
- A block may use the names it lists in `CASES` without defining them; `Given` supplies each as
  a real object on that database (see its docstring). Everything else the block imports or
  defines itself.
- Every block has an entry in `CASES`, keyed `<page>:<section> #<n>` (the n-th block under
  that `#` or `##` heading of README.md, or of a page named by its path under docs/pages),
  whose check looks at what the block did: a block that runs but does nothing fails.
  A block without an entry, or an entry without a block, fails the suite.
- A block that cannot run here is marked on the line before its fence with
  `<!-- readme-test: needs VARIABLE -->`: it is compiled always and run only when that variable
  is set. A block that continues another one (`follows`) runs in the namespace that one left.
- A block that is a whole program (`as_script`) runs as `python file.py` would run it: as
  `__main__`, in a thread of its own where its `asyncio.run` starts its own event loop.
- Other blocks (sh, text, no language) are not run: the CLI has tests of its own.
"""

from __future__ import annotations

import ast
import asyncio
import base64
import contextlib
import inspect
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, TypedDict

import pytest
from dex import AsyncClient, AsyncWorker, BlobCacheConfig, open_blob_cache
from langchain_core.messages import AIMessage
from langchain_core.tools import BaseTool, tool
from langgraph.graph import START, StateGraph
from langgraph.types import Command

from adapters.demo.model import ScriptedChatModel
from adapters.langgraph import SignoffTools, ToolSpec, encrypted_checkpointer
from adapters.langgraph.reencrypt import key_usage
from approvals import ApprovalPolicy, ApprovalStatus, ApprovalStore, Decision
from ledger.calls.model import CallContext, CallStatus, Effect
from ledger.calls.service import ToolLedger
from ledger.journal import Journal
from ledger.keys import KeyRing, LocalKek, Purpose
from ledger.store import Database
from tests.support.directory import list_reviewers
from tests.support.scratch import scratch_database

from .support.processes import TEST_KEK

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = ROOT / "docs" / "pages"
MARKER = re.compile(r"<!--\s*readme-test:(.*?)-->")
NEEDS = re.compile(r"\s*needs ([A-Z][A-Z0-9_]*)\s*")

Namespace = dict[str, Any]


# -- the blocks ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    """One ```python block: `key` is `<page>:<section> #<n>`, `line` the page's line of its
    first line of code, `needs` the environment variable it needs to run (None: it always
    runs), `file` the page it is on."""

    key: str
    line: int
    source: str
    needs: str | None = None
    file: Path = README

    def compiled(self) -> Any:
        # Blank lines in front, so a traceback names the page's own line numbers.
        padded = "\n" * (self.line - 1) + self.source
        return compile(padded, str(self.file), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


def python_blocks(text: str, page: str | None = None, file: Path = README) -> list[Block]:
    """The ```python blocks of a Markdown text, in order, keyed `<page>:<section> #<n>` (just
    `<section> #<n>` without a page).

    Raises:
        ValueError: a block is not closed, or a readme-test marker is not one this test knows
            (or stands before something other than a ```python fence).
    """
    lines = text.splitlines()
    blocks: list[Block] = []
    section, counts = "(top)", dict[str, int]()
    marker: tuple[int, str] | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if line.startswith(("# ", "## ")):
            section = line.lstrip("#").strip()
        found = MARKER.fullmatch(stripped)
        if found:
            marker = (i + 1, found.group(1))
        elif stripped.startswith("```"):
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
            if end is None:
                raise ValueError(f"{file.name} line {i + 1}: a code block is never closed")
            language = stripped[3:].strip()
            if language.startswith("py") and language != "python":
                raise ValueError(f"{file.name} line {i + 1}: write ```python, not {stripped}")
            if language == "python":
                counts[section] = counts.get(section, 0) + 1
                needs = None
                if marker is not None:
                    wanted = NEEDS.fullmatch(marker[1])
                    if wanted is None:
                        raise ValueError(
                            f"{file.name} line {marker[0]}: unknown marker {marker[1]!r}"
                        )
                    needs = wanted.group(1)
                source = "\n".join(lines[i + 1 : end]) + "\n"
                key = f"{section} #{counts[section]}"
                key = key if page is None else f"{page}:{key}"
                blocks.append(Block(key, i + 2, source, needs, file))
            elif marker is not None:
                raise ValueError(
                    f"{file.name} line {marker[0]}: the marker stands before {stripped}"
                )
            marker = None
            i = end
        elif stripped and marker is not None:
            raise ValueError(
                f"{file.name} line {marker[0]}: the marker stands before no code block"
            )
        i += 1
    if marker is not None:
        raise ValueError(f"{file.name} line {marker[0]}: the marker stands before no code block")
    return blocks


def documented_blocks() -> list[Block]:
    """The blocks of README.md, then of every page of the documentation, by path."""
    blocks = python_blocks(README.read_text(encoding="utf-8"), README.name)
    for file in sorted(PAGES.rglob("*.md")):
        page = file.relative_to(PAGES).as_posix()
        blocks += python_blocks(file.read_text(encoding="utf-8"), page, file)
    return blocks


BLOCKS = documented_blocks()
BY_KEY = {b.key: b for b in BLOCKS}


# -- what blocks may use without defining it ------------------------------------------------------


class Counter(TypedDict):
    steps: list[str]


def add_step(state: Counter) -> dict[str, list[str]]:
    return {"steps": [*state["steps"], f"step {len(state['steps']) + 1}"]}


def ask_for(*calls: tuple[str, str, dict[str, Any]]) -> AIMessage:
    return AIMessage(
        content="",
        tool_calls=[{"id": i, "name": n, "args": a, "type": "tool_call"} for i, n, a in calls],
    )


# The support agent's model: looks the order up, then asks to refund it.
AGENT_SCRIPT = [
    ask_for(("call-lookup", "lookup_order", {"order_id": "A-1042"})),
    ask_for(("call-refund", "refund", {"order_id": "A-1042", "amount": 120})),
    AIMessage(content="Done: 120 EUR for order A-1042 is on its way back to you."),
]
SLACK_USER = "slack:T0001:U0B055"


class Given:
    """The names blocks use without defining them, each a real object on the block's
    own database. A block gets only the names its `CASES` entry lists.

    - `db`, `ring`: the database (a `Database`) and its key ring under the session's KEK.
    - `store`: an `ApprovalStore` on them.
    - `refund`, `lookup`: ledger tools, `async fn(args, context) -> JSON value`; every run of
      `refund` is kept in `refunds`.
    - `approval_id`: an approval of `refund` with `{"order": "A-1"}` for call `call-3` of run
      `run-7`, approved by alice (not yet used).
    - `model`: LangChain's fake chat model (no API key) scripted as the support agent: it calls
      `lookup_order(order_id="A-1042")`, then `refund(order_id="A-1042", amount=120)`.
    - `tools`: the LangChain tools `lookup_order` and `refund` (runs kept in `refunds` too).
    - `signoff`: a `SignoffTools` whose `refund` needs an approval (anyone may give it).
    - `builder`, `inputs`: an uncompiled `StateGraph` of two steps, and its input.
    - `payload`, `runtime_user_id`: a Welt conversation turn asking for a refund, and the Slack
      user Welt names.
    - `addr`, `cache`: the Dex server (`DEX_SERVER_ADDRESS`, else a port nobody listens on) and
      a Dex blob cache in a temporary folder.
    """

    def __init__(self, db: Database, ring: KeyRing, tmp_path: Path, stack: AsyncExitStack):
        self.db, self.ring, self.tmp_path, self.stack = db, ring, tmp_path, stack
        self.refunds: list[dict[str, Any]] = []
        self._store: ApprovalStore | None = None

    async def namespace(self, names: tuple[str, ...]) -> Namespace:
        return {name: await getattr(self, f"given_{name}")() for name in names}

    async def given_db(self) -> Database:
        return self.db

    async def given_ring(self) -> KeyRing:
        return self.ring

    async def given_store(self) -> ApprovalStore:
        if self._store is None:
            self._store = ApprovalStore(self.db, self.ring, poll_interval=0.05)
            self.stack.push_async_callback(self._store.close)
        return self._store

    async def given_refund(self) -> Callable[[dict[str, Any], CallContext], Awaitable[Any]]:
        async def refund(args: dict[str, Any], context: CallContext) -> dict[str, Any]:
            self.refunds.append(args)
            return {"refunded": args["order"]}

        return refund

    async def given_lookup(self) -> Callable[[dict[str, Any], CallContext], Awaitable[Any]]:
        async def lookup(args: dict[str, Any], context: CallContext) -> dict[str, Any]:
            return {"order": args["order"], "status": "delivered"}

        return lookup

    async def given_approval_id(self) -> str:
        store = await self.given_store()
        approval = await store.request(
            run_id="run-7",
            tool="refund",
            args={"order": "A-1"},
            call_id="call-3",
            requested_by="support-agent",
        )
        await store.decide(approval.approval_id, Decision.approve(), "alice")
        return approval.approval_id

    async def given_model(self) -> ScriptedChatModel:
        return ScriptedChatModel(script=list(AGENT_SCRIPT))

    async def given_tools(self) -> list[BaseTool]:
        refunds = self.refunds

        @tool
        async def lookup_order(order_id: str) -> str:
            """Look up an order."""
            return f"order {order_id}: 120 EUR, delivered"

        @tool
        async def refund(order_id: str, amount: int) -> str:
            """Refund money on an order."""
            refunds.append({"order_id": order_id, "amount": amount})
            return f"refunded {amount} EUR on {order_id}"

        return [lookup_order, refund]

    async def given_signoff(self) -> SignoffTools:
        ledger = ToolLedger(self.db, self.ring, poll_interval=0.05)
        self.stack.push_async_callback(ledger.close)
        specs = [
            ToolSpec("lookup_order", effect=Effect.READ),
            ToolSpec("refund", approval=ApprovalPolicy()),
        ]
        tools = SignoffTools(ledger, await self.given_store(), specs)
        self.stack.push_async_callback(tools.close)
        return tools

    async def given_builder(self) -> StateGraph[Counter, Any, Any, Any]:
        builder = StateGraph(Counter)
        builder.add_node("first", add_step)
        builder.add_node("second", add_step)
        builder.add_edge(START, "first")
        builder.add_edge("first", "second")
        return builder

    async def given_inputs(self) -> Counter:
        return {"steps": []}

    async def given_payload(self) -> dict[str, Any]:
        text = "<@U0123ABCD>: order A-1042 arrived broken, please refund it"
        return {"messages": [{"role": "user", "content": [{"text": text}]}]}

    async def given_runtime_user_id(self) -> str:
        return SLACK_USER

    async def given_addr(self) -> str:
        return os.environ.get("DEX_SERVER_ADDRESS") or "127.0.0.1:1"

    async def given_cache(self) -> Any:
        cache = open_blob_cache(BlobCacheConfig(str(self.tmp_path / "dex-cache"), 1 << 20))
        self.stack.callback(cache.close)
        return cache


# -- what each block must have done ---------------------------------------------------------------


async def the_agent_file_refunded_once_after_alice_approved(ns: Namespace, given: Given) -> None:
    async with given.db.connection() as conn:
        calls = await conn.fetch("SELECT run_id, tool, status, approved_by FROM tool_calls")
        approvals = await conn.fetch("SELECT run_id, tool, status, consumed_by FROM approvals")
    [run] = {c["run_id"] for c in calls}
    assert run.startswith("support-")
    assert sorted((c["tool"], c["status"], list(c["approved_by"])) for c in calls) == [
        ("lookup_order", "succeeded", []),
        ("refund", "succeeded", ["alice"]),
    ]
    [approval] = approvals
    assert (approval["run_id"], approval["tool"], approval["status"]) == (run, "refund", "approved")
    assert approval["consumed_by"] == f"{run}/call-refund"  # the refund used it, once


def ran_once_after_alice_approved(tool: str) -> Callable[[Namespace, Given], Awaitable[None]]:
    """A guide's SDK run: one call of `tool`, approved by alice, that used the approval once,
    and the run's one pause resumed."""

    async def check(ns: Namespace, given: Given) -> None:
        async with given.db.connection() as conn:
            calls = await conn.fetch("SELECT run_id, tool, status, approved_by FROM tool_calls")
            approvals = await conn.fetch("SELECT run_id, status, consumed_by FROM approvals")
            pauses = await conn.fetch("SELECT run_id, status FROM paused_runs")
        [call] = calls
        run = call["run_id"]
        assert (call["tool"], call["status"], list(call["approved_by"])) == (
            tool,
            "succeeded",
            ["alice"],
        )
        [approval] = approvals
        assert (approval["run_id"], approval["status"]) == (run, "approved")
        assert approval["consumed_by"] == f"{run}/call-1"  # the call used it, once
        assert [(p["run_id"], p["status"]) for p in pauses] == [(run, "resumed")]

    return check


async def the_event_is_in_its_stream(ns: Namespace, given: Given) -> None:
    events = await Journal(given.db).read_stream("order:42")
    assert [(e.version, e.type, e.data, e.actor) for e in events] == [
        (1, "order.placed", {"total": 12.5}, "alice")
    ]
    assert [e.position for e in ns["events"]] == [events[0].position]
    assert ns["report"].first_bad is None
    assert ns["db"].url == given.db.url  # `Database.from_env()` found the block's database


async def the_refund_ran_once_with_its_approval(ns: Namespace, given: Given) -> None:
    outcome = ns["outcome"]
    assert (outcome.status, outcome.result, outcome.replayed) == (
        CallStatus.SUCCEEDED,
        {"refunded": "A-1"},
        False,
    )
    assert given.refunds == [{"order": "A-1"}]
    call = await ns["ledger"].get("run-7", "call-3")
    assert (call.status, call.approval_id) == (CallStatus.SUCCEEDED, ns["approval_id"])
    approval = await ns["store"].get(ns["approval_id"])
    assert approval.consumed and approval.consumed_by == "run-7/call-3"


async def the_quorum_approved_and_the_approval_is_used(ns: Namespace, given: Given) -> None:
    used = ns["used"]
    approval = await ns["store"].get(used.approval_id)
    assert approval.status is ApprovalStatus.APPROVED
    assert approval.consumed and approval.consumed_by == "run-7/call-3"
    assert sorted(r.reviewer for r in approval.reviews) == ["alice", "bob"]
    assert (approval.run_id, approval.tool, approval.call_id) == ("run-7", "refund", "call-3")


async def the_request_carries_its_hints_and_context(ns: Namespace, given: Given) -> None:
    revealed = ns["revealed"]
    assert revealed.context.reason.startswith("The parcel never arrived")
    assert revealed.context.last_user_message.startswith("My order A-1 never came")
    policy = (await ns["store"].get(revealed.approval_id)).policy
    assert policy.headline == ("amount", "currency") and policy.sensitive == {"iban"}
    assert policy.irreversible and policy.args_schema == ns["policy"].args_schema
    assert revealed.args["amount"] == 120


async def the_agent_paused_at_the_refund(ns: Namespace, given: Given) -> None:
    [paused] = ns["state"]["__interrupt__"]
    [request] = paused.value["action_requests"]  # the batched shape: one per gated call
    assert request["name"] == "refund"
    assert paused.value["review_configs"] == [
        {"action_name": "refund", "allowed_decisions": ["approve", "reject", "edit", "respond"]}
    ]
    approval = await ns["signoff"].approvals.get(request["approval_id"])
    assert (approval.status, approval.run_id, approval.tool) == (
        ApprovalStatus.PENDING,
        "run-7",
        "refund",
    )
    assert approval.policy.approvers == frozenset({"group:support-leads"})
    lookup = await ns["signoff"].ledger.get("run-7", "call-lookup")
    assert (lookup.status, lookup.effect) == (CallStatus.SUCCEEDED, Effect.READ)
    assert given.refunds == []  # nothing refunded before a support lead approves


async def the_fan_out_and_the_one_use_node_ran_once(ns: Namespace, given: Given) -> None:
    [paused] = ns["state"]["__interrupt__"]
    assert (paused.value["name"], paused.value["args"]) == (
        "refund",
        {"order_id": "A-1042", "amount": 120},
    )
    signoff, config = ns["signoff"], ns["config"]
    async with given.db.connection() as conn:
        ran = await conn.fetch("SELECT tool, status FROM tool_calls WHERE run_id = 'orders-1'")
    assert sorted((r["tool"], r["status"]) for r in ran) == [
        ("check", "succeeded"),
        ("lookup_order", "succeeded"),
        ("lookup_order", "succeeded"),
        ("signoff.pause", "succeeded"),
    ]
    assert given.refunds == []
    await signoff.approvals.decide(paused.value["approval_id"], Decision.approve(), "alice")
    async with encrypted_checkpointer(given.db, given.ring) as saver:  # resumed anew
        done = (
            await ns["graph"]
            .compile(checkpointer=saver)
            .ainvoke(Command(resume="continue"), config)
        )
    assert done["notes"] == ["2 orders found", "refunded 120 EUR on A-1042"]
    assert given.refunds == [{"order_id": "A-1042", "amount": 120}]


async def the_drop_in_asked_once_and_ran_the_refund(ns: Namespace, given: Given) -> None:
    value = ns["pause"].value
    [request] = value["action_requests"]
    assert (request["name"], request["args"]) == ("refund", {"order_id": "A-1042", "amount": 120})
    assert request["description"].startswith("Tool execution pending approval\n\nTool: refund")
    assert value["review_configs"] == [
        {"action_name": "refund", "allowed_decisions": ["approve", "reject"]}
    ]
    assert ns["done"].interrupts == ()
    assert given.refunds == [{"order_id": "A-1042", "amount": 120}]
    approval = await ns["signoff"].approvals.get(request["approval_id"])
    assert approval.status is ApprovalStatus.APPROVED and approval.consumed


async def the_checkpoints_are_stored_encrypted(ns: Namespace, given: Given) -> None:
    config = {"configurable": {"thread_id": "run-7"}}
    async with encrypted_checkpointer(given.db, given.ring) as saver:  # another saver reads it
        state = await ns["builder"].compile(checkpointer=saver).aget_state(config)
        assert state.values == {"steps": ["step 1", "step 2"]}
        usage = await key_usage(saver)
    active = given.ring.active_key_id(Purpose.CHECKPOINT)
    assert usage.plaintext() == 0
    assert set(usage.rows["checkpoints"]) == {active} and set(usage.rows["checkpoint_blobs"]) == {
        active
    }


async def the_worker_is_built_with_both_tools(ns: Namespace, given: Given) -> None:
    runtime = ns["runtime"]
    assert set(runtime.tools) == {"refund", "lookup"}
    refund, lookup = runtime.tool("refund"), runtime.tool("lookup")
    assert (refund.effect, refund.spec.approval) == (
        Effect.IDEMPOTENT_WRITE,
        ApprovalPolicy(expires_in=timedelta(hours=4)),
    )
    assert (lookup.effect, lookup.spec.approval) == (Effect.READ, None)
    assert runtime.store is ns["store"]
    assert ns["flow"].get_flow_type() == "SignoffToolCall"
    assert ns["worker"].worker_target


async def the_flow_ran_the_approved_refund(ns: Namespace, given: Given) -> None:
    result = ns["result"]
    assert (result.status, result.idempotency_key) == (CallStatus.SUCCEEDED, "session-42/t3/call_1")
    assert given.refunds == [{"order": "A-1"}]
    approval = await ns["store"].get(ns["asked"][0].approval_id)
    assert (approval.status, approval.decided_by) == (ApprovalStatus.APPROVED, ("alice",))


async def the_session_worker_finds_the_agents_tools(ns: Namespace, given: Given) -> None:
    flow = ns["sessions"]
    assert flow.get_flow_type() == "SignoffAgentSession"
    runtime = flow.signoff()
    assert set(runtime.tools) == {"lookup_order", "refund"}
    policy = runtime.tool("refund").spec.approval
    assert policy is not None and policy.args_schema is not None  # the tool's, for reviewers
    assert replace(policy, args_schema=None) == ApprovalPolicy()
    assert runtime.tool("lookup_order").effect is Effect.READ
    assert flow.session().graph.checkpointer is ns["saver"]
    assert ns["worker"].worker_target


async def the_session_refunded_once_after_approval(ns: Namespace, given: Given) -> None:
    assert ns["answer"] == AGENT_SCRIPT[-1].content
    assert ns["snapshot"].messages[-1].text == AGENT_SCRIPT[-1].content
    assert given.refunds == [{"order_id": "A-1042", "amount": 120}]


async def slack_is_asked_about_the_refund(ns: Namespace, given: Given) -> None:
    *_, last = ns["events"]
    question = last["interrupt"]
    assert question["name"] == "refund"
    approval = await ns["store"].get(question["id"])
    assert (approval.status, approval.tool) == (ApprovalStatus.PENDING, "refund")
    assert [e for e in ns["events"] if "interrupt" in e] == [last]
    assert given.refunds == []


@dataclass(frozen=True)
class Case:
    """What a block may use without defining it, what it must have done, the block whose
    namespace it continues (a snippet split in two), and whether it is a whole program."""

    given: tuple[str, ...]
    check: Callable[[Namespace, Given], Awaitable[None]]
    follows: str | None = None
    as_script: bool = False


DEX, AGENT_SESSIONS = "guides/dex.md:Dex", "guides/dex.md:Agent sessions"
LANGGRAPH = "guides/langgraph.md"

CASES: dict[str, Case] = {
    "README.md:Add Signoff to your LangGraph agent #1": Case(
        (), the_agent_file_refunded_once_after_alice_approved, as_script=True
    ),
    "concepts/approvals.md:Approvals #1": Case(
        ("db",), the_quorum_approved_and_the_approval_is_used
    ),
    "concepts/approvals.md:What reviewers see #1": Case(
        ("store",), the_request_carries_its_hints_and_context
    ),
    "concepts/journal.md:The journal #1": Case((), the_event_is_in_its_stream),
    "concepts/tool-call-ledger.md:The tool-call ledger #1": Case(
        ("db", "ring", "refund", "store", "approval_id"), the_refund_ran_once_with_its_approval
    ),
    "guides/checkpoints.md:Checkpoints #1": Case(
        ("builder", "inputs"), the_checkpoints_are_stored_encrypted
    ),
    f"{DEX} #1": Case(
        ("db", "ring", "refund", "lookup", "addr", "cache"), the_worker_is_built_with_both_tools
    ),
    f"{DEX} #2": Case((), the_flow_ran_the_approved_refund, follows=f"{DEX} #1"),
    f"{AGENT_SESSIONS} #1": Case(
        ("db", "ring", "model", "tools", "signoff", "addr", "cache"),
        the_session_worker_finds_the_agents_tools,
    ),
    f"{AGENT_SESSIONS} #2": Case(
        (), the_session_refunded_once_after_approval, follows=f"{AGENT_SESSIONS} #1"
    ),
    f"{LANGGRAPH}:LangGraph agents #1": Case(
        ("db", "ring", "model", "tools"), the_agent_paused_at_the_refund
    ),
    f"{LANGGRAPH}:Fan-outs and your own nodes #1": Case(
        ("db", "ring", "tools", "signoff"), the_fan_out_and_the_one_use_node_ran_once
    ),
    f"{LANGGRAPH}:In place of HumanInTheLoopMiddleware #1": Case(
        ("db", "ring", "model", "tools", "signoff"), the_drop_in_asked_once_and_ran_the_refund
    ),
    "guides/openai-agents.md:OpenAI Agents SDK #1": Case(
        (), ran_once_after_alice_approved("cancel_order"), as_script=True
    ),
    "guides/pydantic-ai.md:Example #1": Case(
        (), ran_once_after_alice_approved("refund"), as_script=True
    ),
    "guides/welt.md:Welt #1": Case(
        ("db", "ring", "model", "tools", "signoff", "store", "payload", "runtime_user_id"),
        slack_is_asked_about_the_refund,
    ),
}


# -- running them ---------------------------------------------------------------------------------


async def run_block(block: Block, ns: Namespace, as_script: bool = False) -> None:
    """Run a block as written, with top-level await, in `ns`; a whole program as `__main__`,
    in a thread of its own (its `asyncio.run` needs a thread with no event loop)."""
    if as_script:
        ns["__name__"] = "__main__"
        await asyncio.to_thread(exec, block.compiled(), ns)
        return
    result = eval(block.compiled(), ns)
    if inspect.iscoroutine(result):
        await result


async def close_what_it_opened(ns: Namespace, given: Given) -> None:
    """Stop the Dex Workers and Clients a block made, wait for the tasks it started, and close
    the stores, ledgers and databases it opened (directly, or inside a runtime)."""
    found = list(ns.values())
    found += [getattr(v, a, None) for v in found for a in ("store", "ledger", "approvals")]
    opened = list({id(v): v for v in found if v is not None and v is not given.db}.values())
    for value in opened:
        if isinstance(value, (AsyncWorker, AsyncClient)):
            await value.close()
    for value in opened:
        if isinstance(value, asyncio.Task):
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(value, 60)
    for value in opened:
        if isinstance(value, AsyncExitStack):  # what a block held open (a checkpointer)
            await value.aclose()
    for value in opened:
        if isinstance(value, (ApprovalStore, ToolLedger)):
            await value.close()
    for value in opened:
        if isinstance(value, Database):
            await value.close()


@pytest.fixture
async def scratch_url(server_url: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    """A database of the block's own; `Database.from_env()` and `KeyRing.open(db)` find it."""
    async with scratch_database(server_url, prefix="signoff_readme") as url:
        await list_reviewers(url)  # the reviewers the documentation's examples decide as
        monkeypatch.setenv("SIGNOFF_DATABASE_URL", url)
        monkeypatch.setenv("SIGNOFF_KEK", base64.b64encode(TEST_KEK).decode())
        monkeypatch.delenv("SIGNOFF_KEK_FILE", raising=False)
        yield url


def test_every_python_block_of_the_readme_and_the_docs_has_a_check() -> None:
    assert BLOCKS, "README.md and the docs have no ```python block"
    assert [b.key for b in BLOCKS] == list(CASES), "the blocks and CASES differ"
    for key, case in CASES.items():
        assert case.follows is None or case.follows in BY_KEY, key
        unknown = [n for n in case.given if not hasattr(Given, f"given_{n}")]
        assert not unknown, f"{key}: nothing supplies {unknown}"


@pytest.mark.parametrize("block", BLOCKS, ids=[b.key for b in BLOCKS])
def test_every_python_block_of_the_readme_and_the_docs_compiles(block: Block) -> None:
    block.compiled()


@pytest.mark.parametrize("block", BLOCKS, ids=[b.key for b in BLOCKS])
async def test_a_documented_block_runs_as_written_and_does_what_it_says(
    block: Block, scratch_url: str, tmp_path: Path
) -> None:
    if block.needs and not os.environ.get(block.needs):
        where = block.file.relative_to(ROOT)
        pytest.skip(f"compiled only: {where} line {block.line} needs {block.needs} to run")
    case = CASES[block.key]
    chain = [block]
    while CASES[chain[0].key].follows:
        chain.insert(0, BY_KEY[str(CASES[chain[0].key].follows)])
    async with AsyncExitStack() as stack, await Database.connect(scratch_url) as db:
        given = Given(db, await KeyRing.open(db, LocalKek(TEST_KEK)), tmp_path, stack)
        ns: Namespace = {}
        try:
            for part in chain:
                ns.update(await given.namespace(CASES[part.key].given))
                await run_block(part, ns, CASES[part.key].as_script)
            await case.check(ns, given)
        finally:
            await close_what_it_opened(ns, given)


# -- the parser ------------------------------------------------------------------------------------


def test_blocks_are_keyed_by_section_and_a_marker_binds_the_next_block_only() -> None:
    text = (
        "## One\n```python\na = 1\n```\n```sh\nls\n```\n"
        "<!-- readme-test: needs SOME_SERVER -->\n```python\nb = 2\n```\n"
        "## Two\n```python\nc = 3\n```\n"
    )
    assert python_blocks(text) == [
        Block("One #1", 3, "a = 1\n"),
        Block("One #2", 10, "b = 2\n", "SOME_SERVER"),
        Block("Two #1", 14, "c = 3\n"),
    ]


def test_a_page_keys_its_blocks_by_its_path_and_its_title_is_a_section() -> None:
    page = PAGES / "guides" / "some.md"
    text = "# Title\n```python\na = 1\n```\n## Part\n```python\nb = 2\n```\n"
    assert python_blocks(text, "guides/some.md", page) == [
        Block("guides/some.md:Title #1", 3, "a = 1\n", None, page),
        Block("guides/some.md:Part #1", 7, "b = 2\n", None, page),
    ]


@pytest.mark.parametrize(
    "text",
    [
        "<!-- readme-test: skip -->\n```python\na = 1\n```\n",  # no way out of running
        "<!-- readme-test: needs X -->\n```sh\nls\n```\n",
        "<!-- readme-test: needs X -->\nsome prose\n```python\na = 1\n```\n",
        "```python\na = 1\n",
        "```py\na = 1\n```\n",  # would escape the test
        "```python title=x\na = 1\n```\n",
    ],
)
def test_a_block_with_no_testable_form_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        python_blocks(text)
