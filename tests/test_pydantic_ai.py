"""Pydantic AI agents through Signoff (`adapters.pydantic_ai`): a run paused in one OS process
(an agent worker's login, no reviewer KEK), decided by a reviewer in another (`signoff approvals
decide`), resumed in a third from the server-side pause; approve, reject with a reason, edit.
The failures Pydantic AI's issues report fail closed here: a repeated tool call id (#5761), a
result for a call the pause does not hold or under the wrong category (#7624), approvals the
store does not have or has not decided, a second resume (#4830, #5173). A single-attempt tool
whose worker is killed is `outcome_unknown`, never run twice; a published policy set denies and
allows through the same path."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.capabilities import NativeTool
from pydantic_ai.exceptions import UnexpectedModelBehavior
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.native_tools import CodeExecutionTool, MCPServerTool, WebFetchTool

from adapters.pydantic_ai import (
    ApprovalsPending,
    DuplicateToolCallId,
    PausedRuns,
    PauseTaken,
    Signoff,
    ToolSpec,
    UnboundResult,
    UnsupportedNativeTool,
)
from adapters.runtime import ready
from approvals import ApprovalPolicy, ApprovalStatus, ApprovalStore, ReviewerDirectory
from ledger.calls.model import CallStatus, Effect
from ledger.calls.service import ToolLedger
from ledger.errors import InvalidToolCall
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.settings import Settings

from .support.policies import ADMIN, policy_world
from .support.processes import (
    TEST_KEK,
    TEST_REVIEWER_KEK,
    finish,
    kek_env,
    run_cli,
    start_program,
)
from .support.pydantic_ai_workers import (
    EFFECTS_TABLE,
    REFUND,
    SPECS,
    build_agent,
    scripted,
    tool_results,
)
from .support.until import until
from .support.worker_login import WorkerLogin, worker_login

WORKER_ENV = {**kek_env(), "SIGNOFF_REVIEWER_KEK": ""}  # an agent worker holds no reviewer KEK


@dataclass
class Reviewer:
    """The reviewer's (and the test's) side of the database: the owner, with the reviewer KEK."""

    db: Database
    ring: KeyRing
    store: ApprovalStore
    ledger: ToolLedger
    pauses: PausedRuns


@pytest.fixture(scope="module")
async def login(server_url: str) -> AsyncIterator[WorkerLogin]:
    async with worker_login(server_url, LocalKek(TEST_KEK), prefix="signoff_pyd") as made:
        yield made


@pytest.fixture(scope="module")
async def side(login: WorkerLogin) -> AsyncIterator[Reviewer]:
    settings = Settings(
        database_url=login.owner_url,
        kek=LocalKek(TEST_KEK),
        reviewer_kek=LocalKek(TEST_REVIEWER_KEK),
    )
    async with await Database.connect(login.owner_url, settings=settings) as db:
        ring = await KeyRing.open(db)
        async with db.connection() as conn:
            await conn.execute(EFFECTS_TABLE)
            await conn.execute("GRANT SELECT, INSERT ON pyd_effects TO signoff_app")
        await ReviewerDirectory(db).add("alice", by="test")
        store = ApprovalStore(db, ring, poll_interval=0.05)
        ledger = ToolLedger(db, ring, poll_interval=0.05)
        try:
            yield Reviewer(db, ring, store, ledger, PausedRuns(db, ring))
        finally:
            await ledger.close()
            await store.close()


def new_run(what: str) -> str:
    return f"{what}-{uuid.uuid4().hex[:8]}"


async def step(login: WorkerLogin, *args: str) -> dict[str, Any]:
    """One process of the agent worker on the worker's login; its report."""
    worker = await start_program(
        "tests.support.pydantic_ai_workers", login.url, *args, env=WORKER_ENV
    )
    result: dict[str, Any] = json.loads((await finish(worker, within=90)).splitlines()[-1])
    return result


async def effects(side: Reviewer, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    async with side.db.connection() as conn:
        rows = await conn.fetch(
            "SELECT tool, args FROM pyd_effects WHERE run_id = $1 ORDER BY at", run_id
        )
    return [(r["tool"], json.loads(r["args"])) for r in rows]


async def decide(login: WorkerLogin, approval_id: str, *how: str) -> None:
    decided = await run_cli(
        "approvals", "decide", approval_id, *how, "--by", "alice",
        database_url=login.owner_url, env=kek_env(),
    )  # fmt: skip
    assert decided.code == 0, decided.stderr


EDITED = {"order_id": "A7", "amount": 60}
DECISIONS: dict[str, tuple[tuple[str, ...], Callable[[str], bool], list[Any], CallStatus]] = {
    "approve": (
        ("--approve",),
        lambda text: text == "refunded 120 on A7",
        [("refund", REFUND)],
        CallStatus.SUCCEEDED,
    ),
    "edit": (
        ("--edit", json.dumps(EDITED)),
        lambda text: text == "refunded 60 on A7",
        [("refund", EDITED)],
        CallStatus.SUCCEEDED,
    ),
    "reject": (
        ("--reject", "--reason", "not over 100 without a receipt"),
        lambda text: "A reviewer rejected" in text and "not over 100 without a receipt" in text,
        [],
        CallStatus.DENIED,
    ),
}


@pytest.mark.parametrize("decision", list(DECISIONS))
async def test_paused_in_one_process_decided_in_another_resumed_in_a_third(
    login: WorkerLogin, side: Reviewer, decision: str
) -> None:
    how, read, ran, status = DECISIONS[decision]
    run_id = new_run(decision)
    paused = await step(login, "start", "refund", run_id)
    assert paused["pause_id"] and paused["output"] is None
    [approval] = await side.store.find(run_id=run_id)
    assert paused["waiting"] == [approval.approval_id]
    assert (approval.call_id, approval.tool, approval.requested_by) == ("c-1", "refund", "ann")
    assert await effects(side, run_id) == []

    await decide(login, approval.approval_id, *how)
    done = await step(login, "resume", "refund", paused["pause_id"], "--run-id", run_id)

    assert done["pause_id"] is None and done["pid"] != paused["pid"]
    assert read(done["results"]["c-1"]), done["results"]
    assert await effects(side, run_id) == ran
    record = await side.ledger.get(run_id, "c-1")
    assert record.status is status
    assert (await side.store.get(approval.approval_id)).consumed
    with pytest.raises(PauseTaken):  # the same pause again: stale approvals are not replayed
        async with Signoff(side.ledger, side.store, side.pauses, SPECS) as signoff:
            await signoff.resume(build_agent(login.owner_url), paused["pause_id"])
    assert await effects(side, run_id) == ran


async def test_answered_by_is_the_reviewers_from_the_store(
    login: WorkerLogin, side: Reviewer
) -> None:
    run_id = new_run("answered")
    async with Signoff(side.ledger, side.store, side.pauses, SPECS) as signoff:
        agent = build_agent(login.owner_url)
        paused = await signoff.run(
            agent, "go", run_id=run_id, deps=run_id, model=scripted("refund")
        )
        assert paused.pause_id is not None
        [approval_id] = paused.waiting
        await decide(login, approval_id, "--approve")
        seen: list[Any] = []
        real_run = agent.run

        async def spy(*args: Any, **kwargs: Any) -> Any:
            seen.append(kwargs.get("deferred_tool_results"))
            return await real_run(*args, **kwargs)

        agent.run = spy  # type: ignore[method-assign]
        done = await signoff.resume(agent, paused.pause_id, deps=run_id, model=scripted("refund"))
    assert done.output == "done: 1 results"
    [results] = seen
    assert results.approvals == {"c-1": True}
    assert results.answered_by == {"c-1": "alice"}


async def test_a_repeated_tool_call_id_runs_nothing_and_asks_nobody(
    login: WorkerLogin, side: Reviewer
) -> None:
    run_id = new_run("repeat")
    async with Signoff(side.ledger, side.store, side.pauses, SPECS) as signoff:
        with pytest.raises(UnexpectedModelBehavior, match="duplicate"):
            await signoff.run(
                build_agent(login.owner_url), "go", run_id=run_id, deps=run_id,
                model=scripted("repeat"),
            )  # fmt: skip
    assert await side.store.find(run_id=run_id) == []
    assert await effects(side, run_id) == []
    assert await side.pauses.open_pause(run_id) is None


async def paused_state(
    login: WorkerLogin, side: Reviewer, run_id: str
) -> tuple[str, dict[str, Any]]:
    """A real pause of the refund script, claimed here: its id and its state (opened)."""
    started = await step(login, "start", "refund", run_id)
    claimed = await side.pauses.claim(started["pause_id"])
    return claimed.approval_ids[0], json.loads(claimed.state)


def moved_to_calls(state: dict[str, Any]) -> None:
    """#7624: the approval filed as an external call's result."""
    requests = state["requests"]
    requests["calls"], requests["approvals"] = requests["approvals"], []


def unknown_call(state: dict[str, Any]) -> None:
    """A request for a call the paused response does not hold."""
    part = state["requests"]["approvals"][0]
    metadata = state["requests"]["metadata"]
    metadata["c-9"] = metadata.pop(part["tool_call_id"])
    part["tool_call_id"] = "c-9"


def repeated_in_response(state: dict[str, Any]) -> None:
    """#5761: the paused response repeats the call's id."""
    response = next(m for m in reversed(state["messages"]) if m["kind"] == "response")
    response["parts"].append(dict(response["parts"][0]))


def unknown_approval(state: dict[str, Any]) -> None:
    """An approval id the store does not have."""
    state["requests"]["metadata"]["c-1"]["signoff_approval_id"] = "appr-missing"


@pytest.mark.parametrize(
    ("tamper", "error"),
    [
        (moved_to_calls, UnboundResult),
        (unknown_call, UnboundResult),
        (repeated_in_response, DuplicateToolCallId),
        (unknown_approval, UnboundResult),
    ],
)
async def test_an_ambiguous_pause_fails_closed_and_applies_nothing(
    login: WorkerLogin, side: Reviewer, tamper: Callable[[dict[str, Any]], None], error: type
) -> None:
    run_id = new_run(tamper.__name__.replace("_", "-"))
    approval_id, state = await paused_state(login, side, run_id)
    await decide(login, approval_id, "--approve")
    tamper(state)
    waiting = [approval_id, "appr-missing"] if tamper is unknown_approval else [approval_id]
    pause_id = await side.pauses.pause(run_id, "pydantic_ai", json.dumps(state), waiting)
    async with Signoff(side.ledger, side.store, side.pauses, SPECS) as signoff:
        with pytest.raises(error):
            await signoff.resume(
                build_agent(login.owner_url), pause_id, deps=run_id, model=scripted("refund")
            )
    assert await effects(side, run_id) == []
    assert not (await side.store.get(approval_id)).consumed


async def test_an_approval_of_another_run_is_not_applied(
    login: WorkerLogin, side: Reviewer
) -> None:
    run_id, other = new_run("mine"), new_run("other")
    _, state = await paused_state(login, side, run_id)
    other_id, _ = await paused_state(login, side, other)
    await decide(login, other_id, "--approve")
    state["requests"]["metadata"]["c-1"]["signoff_approval_id"] = other_id
    pause_id = await side.pauses.pause(run_id, "pydantic_ai", json.dumps(state), [other_id])
    async with Signoff(side.ledger, side.store, side.pauses, SPECS) as signoff:
        with pytest.raises(UnboundResult, match="another run"):
            await signoff.resume(build_agent(login.owner_url), pause_id, deps=run_id)
    assert await effects(side, run_id) == await effects(side, other) == []
    assert not (await side.store.get(other_id)).consumed


async def test_a_pending_approval_is_not_resumed(login: WorkerLogin, side: Reviewer) -> None:
    run_id = new_run("pending")
    paused = await step(login, "start", "refund", run_id)
    async with Signoff(side.ledger, side.store, side.pauses, SPECS) as signoff:
        with pytest.raises(ApprovalsPending):
            await signoff.resume(build_agent(login.owner_url), paused["pause_id"], deps=run_id)
    [approval] = await side.store.find(run_id=run_id)
    assert approval.status is ApprovalStatus.PENDING and not approval.consumed
    assert await effects(side, run_id) == []
    await decide(login, approval.approval_id, "--approve")
    async with Signoff(side.ledger, side.store, side.pauses, SPECS) as signoff:
        done = await signoff.resume(  # released: no wait for the lease to lapse
            build_agent(login.owner_url), paused["pause_id"], deps=run_id, model=scripted("refund")
        )
    assert done.output == "done: 1 results"
    assert await effects(side, run_id) == [("refund", REFUND)]


async def test_a_request_whose_time_is_up_is_a_denial_on_resume(
    login: WorkerLogin, side: Reviewer
) -> None:
    """Due but not marked expired (nobody waited on it): the resume records the expiry and the
    model reads it as a denial with its reason, rather than waiting on it for ever."""
    run_id = new_run("expired")
    brief = ApprovalPolicy(expires_in=timedelta(seconds=1))
    specs = [ToolSpec("refund", Effect.SINGLE_ATTEMPT, brief)]
    async with Signoff(side.ledger, side.store, side.pauses, specs, policy=None) as signoff:
        agent = build_agent(login.owner_url)
        paused = await signoff.run(
            agent, "go", run_id=run_id, deps=run_id, model=scripted("refund")
        )
        [approval_id] = paused.waiting

        async def due() -> bool:
            return ready(await side.store.get(approval_id))

        await until(due, 30, "the request's time is up")
        assert (await side.store.get(approval_id)).status is ApprovalStatus.PENDING
        assert paused.pause_id is not None
        done = await signoff.resume(agent, paused.pause_id, deps=run_id, model=scripted("refund"))
    told = tool_results(done.result.all_messages())["c-1"]
    assert "A reviewer rejected the call to `refund`" in told
    assert "expired before anyone decided" in told
    assert (await side.store.get(approval_id)).status is ApprovalStatus.EXPIRED
    assert (await side.ledger.get(run_id, "c-1")).status is CallStatus.DENIED
    assert await effects(side, run_id) == []


async def test_a_long_resume_keeps_its_pause_and_a_second_pause_replaces_it_at_once(
    login: WorkerLogin, side: Reviewer
) -> None:
    """The claim's lease (1 s) is renewed while the resumed run's tool runs for longer, so no
    other worker takes the pause over; the run pausing again ends the old pause and keeps the
    new one in one statement."""
    started, go_on = asyncio.Event(), asyncio.Event()
    ran: list[int] = []
    agent: Agent[str, str] = Agent(deps_type=str)

    @agent.tool_plain
    async def slow(n: int) -> str:
        """Do something slow."""
        ran.append(n)
        started.set()
        await go_on.wait()
        return f"slow {n} done"

    def model() -> FunctionModel:
        turns = [[("s-1", {"n": 1})], [("s-2", {"n": 2})]]

        def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            done = sum(1 for m in messages if isinstance(m, ModelResponse))
            if done < len(turns):
                return ModelResponse(parts=[ToolCallPart("slow", a, i) for i, a in turns[done]])
            return ModelResponse(parts=[TextPart("done")])

        return FunctionModel(reply)

    specs = [ToolSpec("slow", Effect.SINGLE_ATTEMPT, ApprovalPolicy())]
    run_id = new_run("hold")
    short = PausedRuns(side.db, side.ring, lease_seconds=1)
    async with Signoff(side.ledger, side.store, short, specs, policy=None) as signoff:
        first = await signoff.run(agent, "go", run_id=run_id, deps=run_id, model=model())
        assert first.pause_id is not None
        await decide(login, first.waiting[0], "--approve")
        resuming = asyncio.create_task(
            signoff.resume(agent, first.pause_id, deps=run_id, model=model())
        )
        try:
            await asyncio.wait_for(started.wait(), 30)
            async with side.db.connection() as conn:
                lease = await conn.fetchval(
                    "SELECT lease_until FROM paused_runs WHERE pause_id = $1", first.pause_id
                )

            async def lapsed() -> bool:
                async with side.db.connection() as conn:
                    return bool(await conn.fetchval("SELECT now() > $1", lease))

            await until(lapsed, 30, "the first lease's end")
            with pytest.raises(PauseTaken, match="being resumed elsewhere"):
                await PausedRuns(side.db, side.ring, lease_seconds=1).claim(first.pause_id)
        finally:
            go_on.set()
        second = await resuming
    assert second.pause_id not in (None, first.pause_id)
    assert ran == [1]
    async with side.db.connection() as conn:
        ended = await conn.fetchval(
            "SELECT resumed_at FROM paused_runs WHERE pause_id = $1", first.pause_id
        )
        kept = await conn.fetchval(
            "SELECT paused_at FROM paused_runs WHERE pause_id = $1", second.pause_id
        )
    assert ended is not None and ended == kept, "one statement ended one and kept the other"


async def test_a_resumed_approval_is_used_by_its_own_call_only_once(
    login: WorkerLogin, side: Reviewer
) -> None:
    """The model reuses the approved call's id in a later response, with other arguments: that
    call is not taken for the approved one (nor given its arguments and approval)."""
    run_id = new_run("reuse")
    first = await step(login, "start", "reuses_id", run_id)
    await decide(login, first["waiting"][0], "--approve")
    async with Signoff(side.ledger, side.store, side.pauses, SPECS) as signoff:
        with pytest.raises(InvalidToolCall, match="other arguments"):
            await signoff.resume(
                build_agent(login.owner_url), first["pause_id"], deps=run_id,
                model=scripted("reuses_id"),
            )  # fmt: skip
    assert await effects(side, run_id) == [("refund", REFUND)], "ran once, as approved"


async def test_requires_approval_without_a_spec_asks_four_eyes(
    login: WorkerLogin, side: Reviewer
) -> None:
    """A tool made with `requires_approval=True` and no spec: any reviewer decides, never the
    worker that asked (not the self-confirm tier)."""
    agent: Agent[str, str] = Agent(deps_type=str)

    @agent.tool_plain(requires_approval=True)
    async def refund(order_id: str, amount: int) -> str:
        """Refund an order."""
        return f"refunded {amount} on {order_id}"

    run_id = new_run("four-eyes")
    async with Signoff(side.ledger, side.store, side.pauses, policy=None) as signoff:
        paused = await signoff.run(
            agent, "go", run_id=run_id, deps=run_id, model=scripted("refund")
        )
    [approval_id] = paused.waiting
    policy = (await side.store.get(approval_id)).policy
    assert policy.any_reviewer and not policy.allow_self_approval
    assert policy != ApprovalPolicy(), "not the self-confirm tier"


@pytest.mark.parametrize("how", ["code-execution", "mcp-server-tool", "run-capability", "override"])
async def test_native_tools_are_refused_before_anything_runs(
    login: WorkerLogin, side: Reviewer, how: str
) -> None:
    """The provider runs native tools itself; they never reach the toolset Signoff wraps."""
    run_id = new_run("native")
    kwargs: dict[str, Any] = {}
    agent = build_agent(login.owner_url)
    if how == "code-execution":
        agent = build_agent(login.owner_url, capabilities=[NativeTool(CodeExecutionTool())])
    elif how == "mcp-server-tool":
        files = MCPServerTool(id="files", url="https://mcp.example.invalid/files")
        agent = build_agent(login.owner_url, capabilities=[NativeTool(files)])
    elif how == "run-capability":
        kwargs["capabilities"] = [NativeTool(WebFetchTool())]
    async with Signoff(side.ledger, side.store, side.pauses, SPECS) as signoff:
        with contextlib.ExitStack() as stack:
            if how == "override":
                stack.enter_context(agent.override(native_tools=[CodeExecutionTool()]))
            with pytest.raises(UnsupportedNativeTool):
                await signoff.run(
                    agent, "go", run_id=run_id, deps=run_id, model=scripted("refund"), **kwargs
                )
    assert await side.store.find(run_id=run_id) == []
    assert await effects(side, run_id) == []
    assert await side.pauses.open_pause(run_id) is None


async def test_a_killed_single_attempt_call_is_outcome_unknown_and_never_rerun(
    login: WorkerLogin, side: Reviewer
) -> None:
    run_id = new_run("killed")
    worker = await start_program(
        "tests.support.pydantic_ai_workers", login.url, "start", "hang", run_id, "--lease", "1",
        env=WORKER_ENV,
    )  # fmt: skip
    try:
        await until(lambda: _ran(side, run_id), 60, "the tool started")
    finally:
        worker.send_signal(signal.SIGKILL)
        await worker.wait()
    again = await step(login, "start", "hang", run_id, "--lease", "1")
    assert "is unknown" in again["results"]["h-1"]
    assert (await side.ledger.get(run_id, "h-1")).status is CallStatus.OUTCOME_UNKNOWN
    assert await effects(side, run_id) == [("hang", {"order_id": "A7"})]


async def _ran(side: Reviewer, run_id: str) -> bool:
    return bool(await effects(side, run_id))


POLICY = """
@id("refund-cap")
@reason("refunds above 100 are refused")
forbid(principal, action == Action::"refund", resource)
when { context.input.amount > 100 };

@id("reads")
permit(principal, action in Action::"effect:read", resource);
"""


async def test_a_published_set_denies_and_allows_through_the_same_path(server_url: str) -> None:
    async with policy_world(server_url, prefix="signoff_pyd_policy") as world:
        async with world.db.connection() as conn:
            await conn.execute(EFFECTS_TABLE)
        await world.sets.publish(POLICY, by=ADMIN)
        run_id = new_run("policy")
        async with Signoff(world.ledger, world.store, PausedRuns(world.db, world.ring), SPECS) as s:
            done = await s.run(
                build_agent(world.url), "go", run_id=run_id, deps=run_id, model=scripted("two")
            )
        assert done.pause_id is None
        results = {r.tool_call_id: str(r.content) for r in _returns(done.result.all_messages())}
        assert "Signoff's policy refused" in results["c-1"]
        assert "refunds above 100 are refused" in results["c-1"]
        assert "delivered" in results["c-2"]
        assert await world.store.find(run_id=run_id) == []
        async with world.db.connection() as conn:
            rows = await conn.fetch("SELECT tool FROM pyd_effects WHERE run_id = $1", run_id)
        assert [r["tool"] for r in rows] == ["lookup"]
        assert (await world.ledger.get(run_id, "c-1")).status is CallStatus.DENIED


def _returns(messages: list[Any]) -> list[Any]:
    return [
        p for m in messages if m.kind == "request" for p in m.parts if p.part_kind == "tool-return"
    ]


async def test_another_pause_when_the_resumed_run_asks_again(
    login: WorkerLogin, side: Reviewer
) -> None:
    run_id = new_run("again")
    first = await step(login, "start", "asks_twice", run_id)
    await decide(login, first["waiting"][0], "--approve")
    second = await step(login, "resume", "asks_twice", first["pause_id"], "--run-id", run_id)
    assert second["pause_id"] not in (None, first["pause_id"])
    assert second["results"]["c-1"] == "refunded 120 on A7"
    await decide(login, second["waiting"][0], "--approve")
    done = await step(login, "resume", "asks_twice", second["pause_id"], "--run-id", run_id)
    assert done["output"] == "done: 2 results"
    assert [t for t, _ in await effects(side, run_id)] == ["refund", "refund"]
