"""`SignoffMiddleware` in place of LangChain's `HumanInTheLoopMiddleware`: the documented example
(`tests.support.hitl_workers`) with only the import and the constructor changed, paused in one OS
process and resumed in another, sync (`agent.invoke`) and async, batched and per-call, each on a
login with only `signoff_app` and without the reviewer KEK (an agent worker): the resume value is
recorded as self-confirmed by that process, never under a reviewer's name. The store-only mode
and four-eyes policies (a reviewer decides, never a resume value); a refused answer asked again
and a valid one taken in another process."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage

from adapters.langgraph import SignoffMiddleware, ToolSpec
from adapters.langgraph.middleware import EDIT_NOTICE
from approvals import ApprovalPolicy, ApprovalStatus, Decision, ReviewerDirectory
from ledger.keys import LocalKek

from .support.agents import (
    SCRIPTS as AGENT_SCRIPTS,
)
from .support.agents import (
    SPECS,
    Effects,
    Harness,
    Kind,
    ScriptedModel,
    build_agent,
    calls,
    create_effects_table,
    effects_of,
    open_harness,
    thread,
)
from .support.agents import (
    build_tools as agent_tools,
)
from .support.hitl_workers import EFFECTS_TABLE, SCRIPTS, build_tools
from .support.processes import TEST_KEK, finish, kek_env, run_cli, start_program
from .support.worker_login import WorkerLogin, worker_login

MODES = pytest.mark.parametrize("mode", ["sync", "async"])
WRITE_ARGS = {"path": "report.txt", "content": "Q3 numbers"}
SQL_ARGS = {"query": "DELETE FROM records WHERE old"}
PREFIX = "Tool execution pending approval"


@pytest.fixture(scope="module")
async def login(server_url: str) -> AsyncIterator[WorkerLogin]:
    """A scratch database and an agent worker's login on it (only `signoff_app`)."""
    async with worker_login(server_url, LocalKek(TEST_KEK), prefix="signoff_hitl") as made:
        yield made


@pytest.fixture(scope="module")
def hitl_url(login: WorkerLogin) -> str:
    """What the example's processes connect with: the worker's login."""
    return login.url


@pytest.fixture(scope="module")
async def harness(login: WorkerLogin) -> AsyncIterator[Harness]:
    """The owner's view of the database (reads, and the in-process agents)."""
    async with open_harness(login.owner_url, LocalKek(TEST_KEK)) as opened:
        async with opened.db.connection() as conn:
            await conn.execute(EFFECTS_TABLE)
            await conn.execute("GRANT SELECT, INSERT ON hitl_effects TO signoff_app")
        await create_effects_table(opened.db)
        await ReviewerDirectory(opened.db).add("alice", by="test")
        yield opened


# An agent worker holds no reviewer KEK.
WORKER_ENV = {**kek_env(), "SIGNOFF_REVIEWER_KEK": ""}


async def step(
    url: str, mode: str, shape: str, script: str, thread_id: str, resume: Any = None, *opts: str
) -> dict[str, Any]:
    """One run of the example in its own process (a start, or a resume with `resume`), on the
    worker's login without the reviewer KEK."""
    args = [url, mode, shape, script, thread_id]
    if resume is not None:
        args.append(json.dumps(resume))
    worker = await start_program("tests.support.hitl_workers", *args, *opts, env=WORKER_ENV)
    result: dict[str, Any] = json.loads((await finish(worker, within=90)).splitlines()[-1])
    return result


async def effects(harness: Harness, thread_id: str) -> list[tuple[str, dict[str, Any]]]:
    async with harness.db.connection() as conn:
        rows = await conn.fetch(
            "SELECT tool, args FROM hitl_effects WHERE thread_id = $1 ORDER BY at", thread_id
        )
    return [(r["tool"], json.loads(r["args"])) for r in rows]


def tool_results(result: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """What the model read last: each tool message's (status, content), by call id."""
    return {
        m["tool_call_id"]: (m["status"], m["content"])
        for m in result["model_saw"]
        if m["type"] == "tool"
    }


def new_thread(what: str) -> str:
    return f"{what}-{uuid.uuid4().hex[:8]}"


def described(name: str, args: dict[str, Any]) -> str:
    return f"{PREFIX}\n\nTool: {name}\nArgs: {args}"


EDITED = {"path": "report.txt", "content": "Q3 numbers, revised"}
# decision -> (the model's tool message for w-1, the effects)
ONE_CALL: dict[str, tuple[dict[str, Any], tuple[str, str], list[tuple[str, dict[str, Any]]]]] = {
    "approve": (
        {"type": "approve"},
        ("success", "wrote 10 characters to report.txt"),
        [("write_file", WRITE_ARGS)],
    ),
    "edit": (
        {"type": "edit", "edited_action": {"name": "write_file", "args": EDITED}},
        (
            "success",
            f"{EDIT_NOTICE} Executed instead: write_file with arguments "
            f"{json.dumps(EDITED, sort_keys=True)}.\n\n"
            "Tool response:\nwrote 19 characters to report.txt",
        ),
        [("write_file", EDITED)],
    ),
    "reject": (
        {"type": "reject", "message": "not this file"},
        (
            "error",
            "A reviewer rejected the call to `write_file`: not this file. It did not run.",
        ),
        [],
    ),
    "respond": (
        {"type": "respond", "message": "The report exists already."},
        ("success", "The report exists already."),
        [],
    ),
}


@MODES
@pytest.mark.parametrize(
    ("shape", "decision"),
    [(shape, d) for shape in ("batched", "per_call") for d in ONE_CALL],
)
async def test_the_documented_example_paused_in_one_process_and_decided_in_another(
    harness: Harness, login: WorkerLogin, hitl_url: str, mode: str, shape: str, decision: str
) -> None:
    answer, told, ran = ONE_CALL[decision]
    thread_id = new_thread(decision)
    paused = await step(hitl_url, mode, shape, "write", thread_id)

    [pause] = paused["interrupts"]
    [approval] = await harness.store.find(run_id=thread_id)
    if shape == "batched":
        assert pause["value"] == {
            "action_requests": [
                {
                    "name": "write_file",
                    "args": WRITE_ARGS,
                    "description": described("write_file", WRITE_ARGS),
                    "tool_call_id": "w-1",
                    "approval_id": approval.approval_id,
                    "status": "pending",
                }
            ],
            "review_configs": [
                {
                    "action_name": "write_file",
                    "allowed_decisions": ["approve", "reject", "edit", "respond"],
                }
            ],
        }
        resume: Any = {"decisions": [answer]}
    else:
        assert pause["value"]["type"] == "tool_approval"
        assert pause["value"]["description"] == described("write_file", WRITE_ARGS)
        assert pause["value"]["approval_id"] == approval.approval_id
        resume = {pause["id"]: answer}
    assert await effects(harness, thread_id) == []

    resumed = await step(hitl_url, mode, shape, "write", thread_id, resume)
    assert resumed["pid"] != paused["pid"]
    assert resumed["interrupts"] == []
    assert tool_results(resumed) == {"w-1": told}
    assert resumed["messages"][-1]["content"] == "The file is written."
    assert await effects(harness, thread_id) == ran
    recorded = await harness.store.get(approval.approval_id)
    # Self-confirmed by the resuming process and its login, under no reviewer's name.
    confirmed = recorded.self_confirmed
    assert confirmed is not None
    assert (confirmed.login, confirmed.pid) == (login.name, resumed["pid"])
    assert recorded.decided_by == (f"self-confirmed by {login.name}",)
    assert [r.signature for r in recorded.reviews] == [None]
    assert recorded.consumed_by == f"{thread_id}/w-1"
    assert await harness.store.problems(approval.approval_id) == []


@MODES
@pytest.mark.parametrize("shape", ["batched", "per_call"])
async def test_two_calls_of_one_message_approve_one_and_reject_the_other(
    harness: Harness, hitl_url: str, mode: str, shape: str
) -> None:
    thread_id = new_thread(f"two-{shape}")
    paused = await step(hitl_url, mode, shape, "two", thread_id)
    approve, reject = {"type": "approve"}, {"type": "reject", "message": "Keep the records."}

    if shape == "batched":  # one interrupt for the message, read_data not in it
        [pause] = paused["interrupts"]
        requests = pause["value"]["action_requests"]
        assert [(r["name"], r["tool_call_id"]) for r in requests] == [
            ("write_file", "t-1"),
            ("execute_sql", "t-2"),
        ]
        assert [c["allowed_decisions"] for c in pause["value"]["review_configs"]] == [
            ["approve", "reject", "edit", "respond"],
            ["approve", "reject"],
        ]
        resume: Any = {"decisions": [approve, reject]}
    else:  # one interrupt per gated call, answered by interrupt id
        by_name = {p["value"]["name"]: p["id"] for p in paused["interrupts"]}
        assert sorted(by_name) == ["execute_sql", "write_file"]
        resume = {by_name["write_file"]: approve, by_name["execute_sql"]: reject}
    # read_data needs no approval; with the batched shape it waits for the others.
    ran_before = [tool for tool, _ in await effects(harness, thread_id)]
    assert "write_file" not in ran_before and "execute_sql" not in ran_before

    resumed = await step(hitl_url, mode, shape, "two", thread_id, resume)
    assert resumed["interrupts"] == []
    results = tool_results(resumed)
    assert results["t-1"] == ("success", "wrote 10 characters to report.txt")
    assert results["t-2"][0] == "error" and "Keep the records." in results["t-2"][1]
    assert results["t-3"] == ("success", "records: 3 rows")
    assert sorted(tool for tool, _ in await effects(harness, thread_id)) == [
        "read_data",
        "write_file",
    ]


@MODES
@pytest.mark.parametrize("shape", ["batched", "per_call"])
async def test_a_refused_answer_pauses_again_and_a_valid_one_goes_through_in_another_process(
    harness: Harness, hitl_url: str, mode: str, shape: str
) -> None:
    thread_id = new_thread(f"refused-{shape}")
    first = await step(hitl_url, mode, shape, "sql", thread_id)
    edit = {"type": "edit", "edited_action": {"name": "execute_sql", "args": {"query": "x"}}}

    def answer(paused: dict[str, Any], *decisions: Any) -> Any:
        if shape == "batched":
            return {"decisions": list(decisions)}
        [pause] = paused["interrupts"]
        [decision] = decisions
        return {pause["id"]: decision}

    # execute_sql allows no edits: refused, nothing written, a new interrupt says why.
    refused = await step(hitl_url, mode, shape, "sql", thread_id, answer(first, edit))
    [pause] = refused["interrupts"]
    assert "edit" in pause["value"]["refused"]
    [approval] = await harness.store.find(run_id=thread_id)
    assert approval.status is ApprovalStatus.PENDING and approval.reviews == ()

    if shape == "batched":  # a count that does not match is refused the same way
        approve2 = answer(refused, {"type": "approve"}, {"type": "approve"})
        wrong = await step(hitl_url, mode, shape, "sql", thread_id, approve2)
        assert "2 decisions for 1 action requests" in wrong["interrupts"][0]["value"]["refused"]
        refused = wrong

    # Another process answers validly: the call runs once.
    approve = answer(refused, {"type": "approve"})
    done = await step(hitl_url, mode, shape, "sql", thread_id, approve)
    assert done["interrupts"] == []
    assert tool_results(done) == {"s-1": ("success", "3 rows affected")}
    assert await effects(harness, thread_id) == [("execute_sql", SQL_ARGS)]
    assert (await harness.store.get(approval.approval_id)).status is ApprovalStatus.APPROVED


@MODES
@pytest.mark.parametrize("how", ["policy-approvers", "store-only"])
async def test_store_only_a_resume_value_never_decides_the_store_does(
    harness: Harness, login: WorkerLogin, hitl_url: str, mode: str, how: str
) -> None:
    thread_id = new_thread(how)
    opts = ("--policy-approvers",) if how == "policy-approvers" else ("--store-only",)
    await step(hitl_url, mode, "batched", "write", thread_id, None, *opts)
    [approval] = await harness.store.find(run_id=thread_id)

    approve = {"decisions": [{"type": "approve"}]}
    refused = await step(hitl_url, mode, "batched", "write", thread_id, approve, *opts)
    [pause] = refused["interrupts"]
    assert "store only" in pause["value"]["refused"]
    assert (await harness.store.get(approval.approval_id)).reviews == ()
    assert await effects(harness, thread_id) == []

    still = await step(hitl_url, mode, "batched", "write", thread_id, "continue", *opts)
    assert still["interrupts"] and "refused" not in still["interrupts"][0]["value"]

    decided = await run_cli(  # a reviewer, with the reviewer KEK
        "approvals",
        "decide",
        approval.approval_id,
        "--approve",
        "--by",
        "alice",
        database_url=login.owner_url,
        env=kek_env(),
    )
    assert decided.code == 0, decided.stderr
    nothing: Any = {still["interrupts"][0]["id"]: None}
    done = await step(hitl_url, mode, "batched", "write", thread_id, nothing, *opts)
    assert done["interrupts"] == []
    assert tool_results(done) == {"w-1": ("success", "wrote 10 characters to report.txt")}
    assert await effects(harness, thread_id) == [("write_file", WRITE_ARGS)]
    assert (await harness.store.get(approval.approval_id)).decided_by == ("alice",)


# -- one process: the constructor's refusals and the edges of an answer ---------------------------


def agent_with(
    harness: Harness, hitl_url: str, script: list[Any], **options: Any
) -> tuple[Any, Callable[[], Any]]:
    from adapters.demo.model import ScriptedChatModel

    model = ScriptedChatModel(script=script)
    middleware = SignoffMiddleware(
        harness.signoff(()),
        interrupt_on={"write_file": True, "execute_sql": {"allowed_decisions": ["approve"]}},
        **options,
    )
    agent = create_agent(
        model, tools=build_tools(hitl_url), middleware=[middleware], checkpointer=harness.saver
    )
    return agent, lambda: model.seen


async def test_an_edit_naming_another_tool_is_refused_and_asked_again(
    harness: Harness, hitl_url: str
) -> None:
    thread_id = new_thread("rename")
    agent, _ = agent_with(harness, hitl_url, SCRIPTS["write"])
    await agent.ainvoke({"messages": [HumanMessage(content="go")]}, thread(thread_id))
    other = {"type": "edit", "edited_action": {"name": "execute_sql", "args": SQL_ARGS}}
    from langgraph.types import Command

    out = await agent.ainvoke(Command(resume={"decisions": [other]}), thread(thread_id))
    [pause] = out["__interrupt__"]
    assert "execute_sql" in pause.value["refused"] and "write_file" in pause.value["refused"]
    assert await effects(harness, thread_id) == []


def test_interrupt_on_entries_are_checked_when_the_middleware_is_made(harness: Harness) -> None:
    signoff = harness.signoff(())
    with pytest.raises(ValueError, match="allowed_decisions"):
        SignoffMiddleware(signoff, interrupt_on={"t": {"description": "x"}})
    with pytest.raises(ValueError, match="approve, edit, reject or respond"):
        SignoffMiddleware(signoff, interrupt_on={"t": {"allowed_decisions": ["maybe"]}})
    with pytest.raises(ValueError, match="when"):
        SignoffMiddleware(
            signoff, interrupt_on={"t": {"allowed_decisions": ["approve"], "when": bool}}
        )
    with pytest.raises(ValueError, match="shape"):
        SignoffMiddleware(signoff, shape="sideways")  # type: ignore[arg-type]
    # HumanInTheLoopMiddleware's keyword for the shape, so its per-call examples run as written.
    assert SignoffMiddleware(signoff, interrupt_mode="per_call").shape == "per_call"
    assert SignoffMiddleware(signoff, shape="per_call").shape == "per_call"
    assert SignoffMiddleware(signoff).shape == "batched"
    with pytest.raises(ValueError, match="give one"):
        SignoffMiddleware(signoff, interrupt_mode="per_call", shape="batched")
    made = SignoffMiddleware(signoff, interrupt_on={"t": {"allowed_decisions": ["approve"]}})
    policy = made.signoff.spec("t").approval
    assert policy is not None and {str(k) for k in policy.allowed} == {"approve"}
    assert made.signoff.spec("u").approval is None, "no entry: the spec decides (none here)"


def test_sync_invoke_without_a_loop_of_its_own_says_what_to_do(
    harness: Harness, hitl_url: str
) -> None:
    from adapters.demo.model import ScriptedChatModel

    model = ScriptedChatModel(script=[calls(("x-1", "write_file", WRITE_ARGS))])
    middleware = SignoffMiddleware(harness.signoff(()), interrupt_on={"write_file": True})
    # No checkpointer: it fails before anything would pause.
    agent = create_agent(model, tools=build_tools(hitl_url), middleware=[middleware])
    with pytest.raises(RuntimeError, match="from_conn_string_sync"):
        agent.invoke({"messages": [HumanMessage(content="go")]}, thread(new_thread("noloop")))


async def test_the_tool_node_asks_again_after_a_refusal_and_decides_in_the_store_only(
    harness: Harness,
) -> None:
    from langgraph.types import Command

    lookup, _ = SPECS
    refund = ToolSpec("refund", approval=ApprovalPolicy(approvers=frozenset({"alice"})))
    signoff = harness.signoff([lookup, refund])
    model = ScriptedModel(script=AGENT_SCRIPTS["refund"])
    graph = build_agent(Kind.GRAPH, model, agent_tools(Effects(harness.db)), signoff, harness.saver)
    config = thread(new_thread("node-store"))
    await graph.ainvoke({"messages": [HumanMessage(content="refund A7")]}, config)

    out = await graph.ainvoke(Command(resume={"type": "approve"}), config)
    [pause] = out["__interrupt__"]
    assert "store only" in pause.value["refused"]
    [request] = pause.value["requests"]
    assert (await harness.store.get(request["approval_id"])).reviews == ()

    await harness.store.decide(request["approval_id"], Decision.approve(), "alice")
    out = await graph.ainvoke(Command(resume="continue"), config)
    assert "__interrupt__" not in out
    thread_id = config["configurable"]["thread_id"]
    assert [e["args"] for e in await effects_of(harness.db, thread_id, "refund")] == [
        {"order_id": "A7", "amount": 120}
    ]


async def test_an_entrys_description_replaces_the_prefix_tool_and_arguments(
    harness: Harness, hitl_url: str
) -> None:
    from adapters.demo.model import ScriptedChatModel

    def about_sql(tool_call: Any, state: Any, runtime: Any) -> str:
        return f"Run {tool_call['args']['query']!r}? ({len(state['messages'])} messages so far)"

    middleware = SignoffMiddleware(
        harness.signoff(()),
        interrupt_on={
            "write_file": {"allowed_decisions": ["approve"], "description": "Check the path"},
            "execute_sql": {"allowed_decisions": ["approve", "reject"], "description": about_sql},
        },
    )
    model = ScriptedChatModel(script=SCRIPTS["two"])
    agent = create_agent(
        model, tools=build_tools(hitl_url), middleware=[middleware], checkpointer=harness.saver
    )
    out = await agent.ainvoke(
        {"messages": [HumanMessage(content="go")]}, thread(new_thread("described"))
    )
    [pause] = out["__interrupt__"]
    assert [r["description"] for r in pause.value["action_requests"]] == [
        "Check the path",
        f"Run {SQL_ARGS['query']!r}? (2 messages so far)",
    ]
    assert [c["allowed_decisions"] for c in pause.value["review_configs"]] == [
        ["approve"],
        ["approve", "reject"],
    ]


async def test_a_batch_with_one_refused_answer_takes_the_others_and_asks_about_all_again(
    harness: Harness, hitl_url: str
) -> None:
    from langgraph.types import Command

    thread_id = new_thread("partial")
    agent, _ = agent_with(harness, hitl_url, SCRIPTS["two"])
    config = thread(thread_id)
    await agent.ainvoke({"messages": [HumanMessage(content="go")]}, config)
    # execute_sql allows approve only here: the reject is refused, the approve taken.
    approve, reject = {"type": "approve"}, {"type": "reject", "message": "no"}
    out = await agent.ainvoke(Command(resume={"decisions": [approve, reject]}), config)
    [pause] = out["__interrupt__"]
    assert pause.value["refused"].startswith("action 2 (execute_sql): ")
    assert [r["status"] for r in pause.value["action_requests"]] == ["approved", "pending"]

    # The same calls, answered in full: the replayed first answer and the new one agree.
    out = await agent.ainvoke(Command(resume={"decisions": [approve, approve]}), config)
    assert "__interrupt__" not in out
    assert sorted(tool for tool, _ in await effects(harness, thread_id)) == [
        "execute_sql",
        "read_data",
        "write_file",
    ]
    approvals = await harness.store.find(run_id=thread_id)
    assert sorted(len(a.reviews) for a in approvals) == [1, 1], "each decided once"


@pytest.mark.parametrize("store_only", [None, False])
async def test_a_four_eyes_approval_is_never_decided_by_a_resume_value(
    harness: Harness, hitl_url: str, store_only: bool | None
) -> None:
    """Whatever `store_only` says: an authenticated reviewer decides a four-eyes approval."""
    from langgraph.types import Command

    from adapters.demo.model import ScriptedChatModel

    four_eyes = ToolSpec("write_file", approval=ApprovalPolicy(any_reviewer=True))
    middleware = SignoffMiddleware(
        harness.signoff([four_eyes]),
        interrupt_on={"write_file": True},
        store_only=store_only,
    )
    model = ScriptedChatModel(script=SCRIPTS["write"])
    agent = create_agent(
        model, tools=build_tools(hitl_url), middleware=[middleware], checkpointer=harness.saver
    )
    thread_id = new_thread("four-eyes")
    config = thread(thread_id)
    await agent.ainvoke({"messages": [HumanMessage(content="go")]}, config)
    [approval] = await harness.store.find(run_id=thread_id)
    assert approval.tier.value == "four_eyes"

    out = await agent.ainvoke(Command(resume={"decisions": [{"type": "approve"}]}), config)
    [pause] = out["__interrupt__"]
    assert "four-eyes" in pause.value["refused"]
    assert (await harness.store.get(approval.approval_id)).reviews == ()
    assert await effects(harness, thread_id) == []

    await harness.store.decide(approval.approval_id, Decision.approve(), "alice")  # listed
    out = await agent.ainvoke(Command(resume="continue"), config)
    assert "__interrupt__" not in out
    assert await effects(harness, thread_id) == [("write_file", WRITE_ARGS)]
    assert (await harness.store.get(approval.approval_id)).decided_by == ("alice",)
