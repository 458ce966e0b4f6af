"""OpenAI Agents SDK agents through `SignoffAgents`: every function tool call through the ledger
and the policy, approvals requested in Signoff and decided by a reviewer there, the paused
`RunState` kept server-side and resumed once, by any worker, with the store's decisions.

Paused in one OS process, decided in another, resumed in a third, on a login with only
`signoff_app` and no reviewer KEK; the SDK failures the adapter answers (openai-agents-python
#4409, #4264, #4244), each as a test; SIGKILL inside a single-attempt tool; a published policy
set. Real PostgreSQL, the real SDK, a scripted `Model`; no network.
"""

from __future__ import annotations

import asyncio
import json
import signal
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.mcp import MCPServerStdio
from agents.tool_context import ToolContext

from adapters.openai_agents import (
    AmbiguousRunState,
    ApprovalsPending,
    Finished,
    NotApprovedInSignoff,
    Paused,
    SignoffAgents,
    ToolSpec,
    UnsupportedTool,
)
from adapters.runtime import ready
from approvals import ApprovalPolicy, ApprovalStatus, ApprovalStore, Decision, ReviewerDirectory
from ledger.calls import CallStatus, Effect, ToolLedger
from ledger.keys import KeyRing, LocalKek
from ledger.pauses import PausedRuns, PauseTaken
from ledger.store import Database
from ledger.store.settings import Settings
from tests.support.openai_agents_workers import (
    EFFECTS_TABLE,
    SPECS,
    ScriptedCalls,
    build_tools,
    shop,
    tool_outputs,
)
from tests.support.policies import ADMIN, PolicyWorld, policy_world

from .support.processes import (
    TEST_KEK,
    TEST_REVIEWER_KEK,
    finish,
    kek_env,
    run_cli,
    start_program,
)
from .support.until import until
from .support.worker_login import WorkerLogin, worker_login
from .test_policy_point import REFUND_TIERS

# An agent worker holds no reviewer KEK.
WORKER_ENV = {**kek_env(), "SIGNOFF_REVIEWER_KEK": ""}
REFUND = {"order": "A-1042", "amount": 120}


@pytest.fixture(scope="module", autouse=True)
def no_tracing() -> None:
    set_tracing_disabled(True)  # nothing leaves the machine


@pytest.fixture(scope="module")
async def login(server_url: str) -> AsyncIterator[WorkerLogin]:
    async with worker_login(server_url, LocalKek(TEST_KEK), prefix="signoff_oai") as made:
        yield made


@pytest.fixture(scope="module")
async def reviewer(login: WorkerLogin) -> AsyncIterator[ApprovalStore]:
    """The reviewer side: the owner's login with the reviewer KEK (it signs decisions)."""
    settings = Settings(
        database_url=login.owner_url,
        kek=LocalKek(TEST_KEK),
        reviewer_kek=LocalKek(TEST_REVIEWER_KEK),
    )
    async with await Database.connect(login.owner_url, settings=settings) as db:
        async with db.connection() as conn:
            await conn.execute(EFFECTS_TABLE)
            await conn.execute("GRANT SELECT, INSERT ON oai_effects TO signoff_app")
        await ReviewerDirectory(db).add("alice", by="test")
        store = ApprovalStore(db, await KeyRing.open(db), poll_interval=0.05)
        yield store
        await store.close()


@pytest.fixture
async def signoff(login: WorkerLogin, reviewer: ApprovalStore) -> AsyncIterator[SignoffAgents]:
    """The adapter in this process, on the worker's login."""
    async with await Database.connect(login.url, settings=login.settings, pool_size=4) as db:
        ring = await KeyRing.open(db, create_missing=False)
        store = ApprovalStore(db, ring, poll_interval=0.05)
        ledger = ToolLedger(db, ring, poll_interval=0.05)
        try:
            async with SignoffAgents(
                ledger, store, PausedRuns(db, ring, lease_seconds=30), SPECS
            ) as made:
                yield made
        finally:
            await ledger.close()
            await store.close()


def new_run(what: str) -> str:
    return f"oai-{what}-{uuid.uuid4().hex[:8]}"


async def worker(url: str, *args: str) -> dict[str, Any]:
    """One worker process (a run or a resume) on the worker's login; its JSON report."""
    program = await start_program("tests.support.openai_agents_workers", url, *args, env=WORKER_ENV)
    result: dict[str, Any] = json.loads((await finish(program, within=90)).splitlines()[-1])
    return result


async def effects(store: ApprovalStore, run_id: str) -> list[tuple[str, str, dict[str, Any]]]:
    async with store.db.connection() as conn:
        rows = await conn.fetch(
            "SELECT call_id, tool, args FROM oai_effects WHERE run_id = $1 ORDER BY at", run_id
        )
    return [(r["call_id"], r["tool"], json.loads(r["args"])) for r in rows]


async def decide(store: ApprovalStore, approval_id: str, how: str) -> None:
    if how == "reject":
        await store.decide(approval_id, Decision.reject("order already refunded"), "alice")
    elif how == "edit":
        await store.decide(approval_id, Decision.edit({"order": "A-1042", "amount": 60}), "alice")
    else:
        await store.decide(approval_id, Decision.approve(), "alice")


DECISIONS = {
    "approve": ("refunded 120 on A-1042", [("r-1", "refund", REFUND)]),
    "edit": ("refunded 60 on A-1042", [("r-1", "refund", {"order": "A-1042", "amount": 60})]),
    "reject": ("order already refunded", []),
}


@pytest.mark.parametrize("how", list(DECISIONS))
async def test_paused_in_one_process_decided_in_another_resumed_in_a_third(
    login: WorkerLogin, reviewer: ApprovalStore, how: str
) -> None:
    run_id = new_run(how)
    paused = await worker(login.url, "run", run_id)
    assert paused["status"] == "paused", paused
    [approval_id] = paused["approval_ids"]
    approval = await reviewer.get(approval_id)
    assert (approval.run_id, approval.tool, approval.call_id) == (run_id, "refund", "r-1")
    assert approval.requested_by == "dana"
    assert await effects(reviewer, run_id) == []

    await decide(reviewer, approval_id, how)
    resumed = await worker(login.url, "resume", paused["pause_id"])
    assert resumed["status"] == "finished", resumed
    assert resumed["pid"] != paused["pid"]
    told, ran = DECISIONS[how]
    assert told in resumed["outputs"]["r-1"]
    assert told in resumed["final"], "the model read it"
    assert await effects(reviewer, run_id) == ran
    decided = await reviewer.get(approval_id)
    assert decided.decided_by == ("alice",)
    assert decided.consumed_by == f"{run_id}/r-1"
    if how == "reject":
        assert "A reviewer rejected the call to `refund`" in resumed["outputs"]["r-1"]

    again = await worker(login.url, "resume", paused["pause_id"])
    assert (again["status"], again["error"]) == ("error", "PauseTaken")
    assert await effects(reviewer, run_id) == ran


async def test_a_reviewer_decides_with_the_cli_and_two_resumes_race(
    login: WorkerLogin, reviewer: ApprovalStore
) -> None:
    run_id = new_run("cli")
    paused = await worker(login.url, "run", run_id, "--script", "two")
    [approval_id] = paused["approval_ids"]
    assert (await reviewer.get(approval_id)).call_id == "r-7"
    decided = await run_cli(
        "approvals",
        "decide",
        approval_id,
        "--approve",
        "--by",
        "alice",
        database_url=login.owner_url,
        env=kek_env(),
    )
    assert decided.code == 0, decided.stderr
    both = await asyncio.gather(
        worker(login.url, "resume", paused["pause_id"], "--script", "two"),
        worker(login.url, "resume", paused["pause_id"], "--script", "two"),
    )
    assert sorted(r["status"] for r in both) == ["error", "finished"], both
    [lost] = [r for r in both if r["status"] == "error"]
    assert lost["error"] == "PauseTaken"
    [won] = [r for r in both if r["status"] == "finished"]
    assert won["outputs"] == {"r-7": "refunded 80 on A-7", "l-7": "A-7: shipped"}
    ran = sorted((c, t) for c, t, _ in await effects(reviewer, run_id))
    assert ran == [("l-7", "lookup"), ("r-7", "refund")], "each ran once"


async def test_4409_a_state_that_got_no_approval_in_signoff_never_runs_the_tool(
    signoff: SignoffAgents, reviewer: ApprovalStore, login: WorkerLogin
) -> None:
    """Two `RunState`s of one result: approving one in the SDK's memory runs nothing (the
    store has no decision), the other pauses again; once a reviewer decides, resuming the
    pause runs the call once, and a second pause of the same run replays it."""
    run_id = new_run("4409")
    agent = shop(login.url, "refund")
    wrapped = signoff.wrap(agent, run_id, "dana")
    result = await Runner.run(wrapped, "please", context={"run_id": run_id})
    assert [i.tool_name for i in result.interruptions] == ["refund"]
    approved_in_memory, untouched = result.to_state(), result.to_state()
    approved_in_memory.approve(approved_in_memory.get_interruptions()[0])
    with pytest.raises(NotApprovedInSignoff):
        await Runner.run(wrapped, approved_in_memory)
    again = await Runner.run(wrapped, untouched)
    assert [i.tool_name for i in again.interruptions] == ["refund"]
    assert await effects(reviewer, run_id) == []

    first = await signoff.run(agent, "please", run_id=run_id, context={"run_id": run_id})
    second = await signoff.run(agent, "please", run_id=run_id, context={"run_id": run_id})
    assert isinstance(first, Paused) and isinstance(second, Paused)
    assert first.approval_ids == second.approval_ids, "one request: one approval"
    await decide(reviewer, first.approval_ids[0], "approve")
    done = await signoff.resume(agent, first.pause_id)
    replayed = await signoff.resume(agent, second.pause_id)
    assert isinstance(done, Finished) and isinstance(replayed, Finished)
    assert tool_outputs(replayed.result.to_input_list()) == {"r-1": "refunded 120 on A-1042"}
    assert await effects(reviewer, run_id) == [("r-1", "refund", REFUND)], "ran once"
    with pytest.raises(PauseTaken):
        await signoff.resume(agent, first.pause_id)


@pytest.mark.parametrize("change", ["renamed-agent", "tool-removed"])
async def test_4264_an_item_for_an_unknown_agent_or_tool_fails_closed(
    signoff: SignoffAgents, reviewer: ApprovalStore, login: WorkerLogin, change: str
) -> None:
    run_id = new_run("4264")
    agent = shop(login.url, "refund")
    paused = await signoff.run(agent, "please", run_id=run_id, context={"run_id": run_id})
    assert isinstance(paused, Paused)
    await decide(reviewer, paused.approval_ids[0], "approve")
    if change == "renamed-agent":
        other = agent.clone(name="shop-v2")
    else:
        other = agent.clone(tools=[t for t in agent.tools if t.name != "refund"])
    with pytest.raises(AmbiguousRunState, match=r"unknown agent|has no tool"):
        await signoff.resume(other, paused.pause_id)
    assert await effects(reviewer, run_id) == []
    assert (await reviewer.get(paused.approval_ids[0])).consumed_by is None, "nothing applied"
    done = await signoff.resume(agent, paused.pause_id)  # released: no wait for the lease
    assert isinstance(done, Finished)
    assert await effects(reviewer, run_id) == [("r-1", "refund", REFUND)]


async def test_4244_the_approval_holds_when_the_resume_gets_a_context(
    signoff: SignoffAgents, reviewer: ApprovalStore, login: WorkerLogin
) -> None:
    run_id = new_run("4244")
    agent = shop(login.url, "refund")
    paused = await signoff.run(agent, "please", run_id=run_id, context={"run_id": run_id})
    assert isinstance(paused, Paused)
    await decide(reviewer, paused.approval_ids[0], "approve")
    context = {"run_id": run_id, "tenant": "t-9"}
    done = await signoff.resume(agent, paused.pause_id, context=context)
    assert isinstance(done, Finished)
    assert tool_outputs(done.result.to_input_list()) == {"r-1": "refunded 120 on A-1042"}
    assert await effects(reviewer, run_id) == [("r-1", "refund", REFUND)]
    approval = await reviewer.get(paused.approval_ids[0])
    assert approval.consumed_by == f"{run_id}/r-1"


async def test_a_resume_before_the_decision_applies_nothing(
    signoff: SignoffAgents, reviewer: ApprovalStore, login: WorkerLogin
) -> None:
    run_id = new_run("early")
    agent = shop(login.url, "refund")
    paused = await signoff.run(agent, "please", run_id=run_id, context={"run_id": run_id})
    assert isinstance(paused, Paused)
    with pytest.raises(ApprovalsPending):
        await signoff.resume(agent, paused.pause_id)
    assert await effects(reviewer, run_id) == []
    assert (await reviewer.get(paused.approval_ids[0])).status is ApprovalStatus.PENDING
    await decide(reviewer, paused.approval_ids[0], "approve")
    done = await signoff.resume(agent, paused.pause_id)  # released: no wait for the lease
    assert isinstance(done, Finished)
    assert await effects(reviewer, run_id) == [("r-1", "refund", REFUND)]


async def test_a_request_whose_time_is_up_is_a_denial_on_resume(
    signoff: SignoffAgents, reviewer: ApprovalStore, login: WorkerLogin
) -> None:
    """Due but not marked expired (nobody waited on it): the resume records the expiry and the
    model reads it as a denial with its reason, rather than waiting on it for ever."""
    run_id = new_run("expired")
    brief = ApprovalPolicy(approvers=frozenset({"alice"}), expires_in=timedelta(seconds=1))
    specs = [ToolSpec("refund", Effect.SINGLE_ATTEMPT, brief)]
    async with SignoffAgents(
        signoff.ledger, signoff.approvals, signoff.pauses, specs, policy=None
    ) as expiring:
        agent = shop(login.url, "refund")
        paused = await expiring.run(agent, "please", run_id=run_id, context={"run_id": run_id})
        assert isinstance(paused, Paused)
        [approval_id] = paused.approval_ids

        async def due() -> bool:
            return ready(await reviewer.get(approval_id))

        await until(due, 30, "the request's time is up")
        assert (await reviewer.get(approval_id)).status is ApprovalStatus.PENDING
        done = await expiring.resume(agent, paused.pause_id)
    assert isinstance(done, Finished)
    told = tool_outputs(done.result.to_input_list())["r-1"]
    assert "A reviewer rejected the call to `refund`" in told
    assert "expired before anyone decided" in told
    assert (await reviewer.get(approval_id)).status is ApprovalStatus.EXPIRED
    assert (await signoff.ledger.get(run_id, "r-1")).status is CallStatus.DENIED
    assert await effects(reviewer, run_id) == []


async def test_a_long_resume_keeps_its_pause_and_a_second_pause_replaces_it_at_once(
    signoff: SignoffAgents, reviewer: ApprovalStore
) -> None:
    """The claim's lease (1 s) is renewed while the resumed run's tool runs for longer, so no
    other worker takes the pause over; the run pausing again ends the old pause and keeps the
    new one in one statement."""
    started, go_on = asyncio.Event(), asyncio.Event()
    ran: list[int] = []

    @function_tool(needs_approval=True)
    async def slow(ctx: ToolContext[Any], n: int) -> str:
        """Do something slow."""
        ran.append(n)
        started.set()
        await go_on.wait()
        return f"slow {n} done"

    alice = ApprovalPolicy(approvers=frozenset({"alice"}))
    specs = [ToolSpec("slow", Effect.SINGLE_ATTEMPT, alice)]
    model = ScriptedCalls([("slow", {"n": 1}, "s-1")], [("slow", {"n": 2}, "s-2")])
    agent = Agent(name="slowpoke", tools=[slow], model=model)
    db, ring = signoff.ledger.db, signoff.ledger.ring
    run_id = new_run("hold")
    short = PausedRuns(db, ring, lease_seconds=1)
    async with SignoffAgents(signoff.ledger, signoff.approvals, short, specs, policy=None) as s:
        first = await s.run(agent, "go", run_id=run_id)
        assert isinstance(first, Paused)
        await decide(reviewer, first.approval_ids[0], "approve")
        resuming = asyncio.create_task(s.resume(agent, first.pause_id))
        try:
            await asyncio.wait_for(started.wait(), 30)
            async with reviewer.db.connection() as conn:
                lease = await conn.fetchval(
                    "SELECT lease_until FROM paused_runs WHERE pause_id = $1", first.pause_id
                )

            async def lapsed() -> bool:
                async with reviewer.db.connection() as conn:
                    return bool(await conn.fetchval("SELECT now() > $1", lease))

            await until(lapsed, 30, "the first lease's end")
            with pytest.raises(PauseTaken, match="being resumed elsewhere"):
                await PausedRuns(db, ring, lease_seconds=1).claim(first.pause_id)
        finally:
            go_on.set()
        second = await resuming
    assert isinstance(second, Paused) and second.pause_id != first.pause_id
    assert ran == [1]
    async with reviewer.db.connection() as conn:
        ended = await conn.fetchval(
            "SELECT resumed_at FROM paused_runs WHERE pause_id = $1", first.pause_id
        )
        kept = await conn.fetchval(
            "SELECT paused_at FROM paused_runs WHERE pause_id = $1", second.pause_id
        )
    assert ended is not None and ended == kept, "one statement ended one and kept the other"


@pytest.mark.parametrize("how", ["mcp-servers", "mcp-servers-of-a-handoff", "agent-as-tool"])
async def test_tools_that_would_run_past_the_ledger_are_refused(
    signoff: SignoffAgents, login: WorkerLogin, how: str
) -> None:
    """An agent's MCP servers become function tools at run time, and an agent used as a tool
    runs its own tools: neither would go through the wrappers, so neither is wrapped."""
    agent = shop(login.url, "refund")
    files = MCPServerStdio(params={"command": "true"}, name="files")
    inner = Agent(name="inner", tools=list(build_tools(login.url)))
    if how == "mcp-servers":
        agent = agent.clone(mcp_servers=[files])
    elif how == "mcp-servers-of-a-handoff":
        agent = agent.clone(handoffs=[inner.clone(mcp_servers=[files])])
    else:
        agent = agent.clone(
            tools=[*agent.tools, inner.as_tool("ask_inner", "Ask the inner agent.")]
        )
    with pytest.raises(UnsupportedTool, match=r"MCP servers|agent tool 'ask_inner'"):
        signoff.wrap(agent, new_run("refused"))
    with pytest.raises(UnsupportedTool):
        await signoff.run(agent, "please", run_id=new_run("refused"))


async def test_sigkill_inside_a_single_attempt_tool_is_outcome_unknown_never_run_again(
    login: WorkerLogin, reviewer: ApprovalStore, signoff: SignoffAgents
) -> None:
    run_id = new_run("kill")
    lease = ("--lease", "2", "--script", "transfer")
    paused = await worker(login.url, "run", run_id, *lease)
    await decide(reviewer, paused["approval_ids"][0], "approve")
    victim = await start_program(
        "tests.support.openai_agents_workers",
        login.url,
        "resume",
        paused["pause_id"],
        *lease,
        env=WORKER_ENV,
    )
    assert victim.stdout is not None
    while (await asyncio.wait_for(victim.stdout.readline(), 60)).strip() != b"in-tool":
        pass
    victim.send_signal(signal.SIGKILL)
    await victim.wait()

    resumed = await worker(login.url, "resume", paused["pause_id"], *lease, "--claim-for", "30")
    assert resumed["status"] == "finished", resumed
    assert "outcome of the call to `transfer` is unknown" in resumed["outputs"]["t-1"]
    assert [c for c, _, _ in await effects(reviewer, run_id)] == ["t-1"], "never run twice"
    record = await signoff.ledger.get(run_id, "t-1")
    assert record.status is CallStatus.OUTCOME_UNKNOWN


# -- a published policy set --------------------------------------------------------------------


@pytest.fixture(scope="module")
async def world(server_url: str) -> AsyncIterator[PolicyWorld]:
    async with policy_world(server_url, prefix="signoff_oai_policy") as w:
        await w.sets.publish(REFUND_TIERS, by=ADMIN)
        yield w


async def test_a_published_set_allows_asks_and_refuses_through_the_same_path(
    world: PolicyWorld,
) -> None:
    ran: list[int] = []

    @function_tool
    async def refund(ctx: ToolContext[Any], amount: int) -> str:
        """Refund money."""
        ran.append(amount)
        return f"refunded {amount} EUR"

    calls = [("refund", {"amount": a}, f"r-{a}") for a in (20, 80, 900)]
    agent = Agent(name="support", tools=[refund], model=ScriptedCalls(calls))
    run_id = new_run("policy")
    pauses = PausedRuns(world.db, world.ring)
    specs = [ToolSpec("refund", Effect.SINGLE_ATTEMPT)]
    async with SignoffAgents(world.ledger, world.store, pauses, specs) as signoff:
        paused = await signoff.run(agent, "three refunds", run_id=run_id, requested_by="dana")
        assert isinstance(paused, Paused)
        [approval_id] = paused.approval_ids
        approval = await world.store.get(approval_id)
        assert approval.call_id == "r-80"
        assert approval.policy.approvers == frozenset({"group:support-lead"})
        assert 900 not in ran
        await world.store.decide(approval_id, Decision.approve(), "alice")
        done = await signoff.resume(agent, paused.pause_id)
    assert isinstance(done, Finished)
    assert sorted(ran) == [20, 80], "allowed and approved ran once each, 900 never"
    told = tool_outputs(done.result.to_input_list())
    assert told["r-20"] == "refunded 20 EUR" and told["r-80"] == "refunded 80 EUR"
    assert "Signoff's policy refused" in told["r-900"]
    assert "refunds above 500 are refused" in told["r-900"]
    assert (await world.ledger.get(run_id, "r-900")).status is CallStatus.DENIED
