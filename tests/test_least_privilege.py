"""Least privilege: agent workers on a login that has only `signoff_app`, deciders on one that
has only `signoff_reviewer`, and what each of them cannot do even with SQL of its own.

The database is this module's own, migrated and keyed by its owner; nothing below runs as the
owner except that setup.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from langchain_core.messages import HumanMessage
from langgraph.types import Command

from adapters.dex import DecideRequest, DexTool, ToolCallRequest
from adapters.dex.logic import await_approval, call_tool, decide_for_flow
from adapters.langgraph import encrypted_checkpointer
from adapters.runtime import ToolSpec, ask, await_final, decide_once, run
from adapters.welt import (
    AnswerOutcome,
    AnswerStatus,
    parse_interrupt_responses,
    record_answers,
    slack_reviewer,
)
from approvals import (
    ApprovalPolicy,
    ApprovalStatus,
    ApprovalStore,
    Decision,
    ReviewerDirectory,
)
from approvals.projection import ApprovalProjection
from ledger.calls.model import CallContext, CallStatus, Effect, ToolCall, ToolPolicy, call_stream
from ledger.calls.projection import CallProjection
from ledger.calls.service import ToolLedger
from ledger.errors import (
    EventNotPermitted,
    NoActiveKey,
    PermissionDenied,
    ReviewerKekMissing,
    RowOutOfStep,
)
from ledger.journal import Journal
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.logins import temporary_login
from ledger.store.settings import Settings
from tests.support.scratch import scratch_database

from .support.agents import (
    EFFECTS_TABLE,
    Harness,
    Kind,
    answer_all,
    effects_of,
    requests_of,
    thread,
)
from .support.checkpoint_workers import review_graph
from .support.processes import TEST_KEK, TEST_REVIEWER_KEK, kek_env, run_cli
from .support.welt_workers import addressed

_ROWS = {
    "signoff_commit_call": ("tool_calls", CallProjection.row_parameters),
    "signoff_commit_approval": ("approvals", ApprovalProjection.row_parameters),
}


def with_row(statement: str) -> str:
    """A commit function's call written with its row as one jsonb parameter, `$1::jsonb` (a
    forged row is easiest to write as a whole one), as the call of its typed parameters."""
    function = statement.removeprefix("SELECT ").split("(", 1)[0]
    table, columns = _ROWS[function]
    fields = ", ".join(f"r.{column}" for column in columns)
    return (
        statement.replace("$1::jsonb", fields, 1)
        + f" FROM jsonb_populate_record(NULL::{table}, $1::jsonb) AS r"
    )


WELT_FIXTURES = Path(__file__).parent / "fixtures" / "welt"


DIRECTORY = ("alice", "bob", "carol", "slack:U1")


class Logins:
    def __init__(self, owner: str, worker: str, reviewer: str, auditor: str) -> None:
        self.owner, self.worker, self.reviewer, self.auditor = owner, worker, reviewer, auditor


@pytest.fixture(scope="module")
async def logins(server_url: str) -> AsyncIterator[Logins]:
    async with scratch_database(server_url, prefix="signoff_roles") as owner:
        async with await Database.connect(owner) as db:  # the owner makes the data keys
            await KeyRing.open(db, LocalKek(TEST_KEK), reviewer_kek=REVIEWER_KEK)
            # ... and lists the reviewers (a policy naming no approvers admits only those).
            for listed in DIRECTORY:
                await ReviewerDirectory(db).add(listed, by="admin")
        async with (
            temporary_login(owner, "signoff_app") as worker,
            temporary_login(owner, "signoff_reviewer") as reviewer,
            temporary_login(owner, "signoff_auditor") as auditor,
        ):
            yield Logins(owner, worker, reviewer, auditor)


class Side:
    """One side's database, key ring, approval store and tool ledger."""

    def __init__(self, db: Database, ring: KeyRing) -> None:
        self.db, self.ring = db, ring
        self.store = ApprovalStore(db, ring, poll_interval=0.05)
        self.ledger = ToolLedger(db, ring, lease_seconds=1.0, poll_interval=0.05)

    async def close(self) -> None:
        await self.ledger.close()
        await self.store.close()
        await self.db.close()


REVIEWER_KEK = LocalKek(TEST_REVIEWER_KEK)


async def side(url: str, reviewer_kek: LocalKek | None) -> Side:
    """A process on `url`: a worker's holds only the worker KEK, a reviewer's both."""
    settings = Settings(database_url=url, kek=LocalKek(TEST_KEK), reviewer_kek=reviewer_kek)
    db = await Database.connect(url, pool_size=4, settings=settings)
    return Side(db, await KeyRing.open(db, create_missing=False))


@pytest.fixture(scope="module")
async def worker(logins: Logins) -> AsyncIterator[Side]:
    s = await side(logins.worker, None)
    assert not s.ring.can_sign_decisions
    yield s
    await s.close()


@pytest.fixture(scope="module")
async def reviewer(logins: Logins) -> AsyncIterator[Side]:
    s = await side(logins.reviewer, REVIEWER_KEK)
    yield s
    await s.close()


def new_run() -> str:
    return f"lp-{uuid.uuid4().hex[:10]}"


def refund(run_id: str, call_id: str = "c1") -> ToolCall:
    return ToolCall(run_id, call_id, "refund", {"amount": 9}, turn_id="t1")


async def count(db: Database, sql: str, *args: Any) -> int:
    async with db.connection() as conn:
        value: int = await conn.fetchval(sql, *args)
    return value


# -- what they can do ------------------------------------------------------------------------


async def test_a_worker_asks_a_reviewer_decides_and_the_worker_runs_the_call_once(
    worker: Side, reviewer: Side
) -> None:
    ran: list[dict[str, Any]] = []

    async def tool(args: dict[str, Any], context: CallContext) -> str:
        ran.append(args)
        return "refunded"

    spec, call = ToolSpec("refund", approval=ApprovalPolicy()), refund(new_run())
    approval = await ask(worker.store, spec, call, "agent")
    waiting = asyncio.ensure_future(await_final(worker.store, approval.approval_id, 30))
    await asyncio.sleep(0.1)  # lets the wait start first (it must end decided either way)
    await decide_once(reviewer.store, approval.approval_id, Decision.edit({"amount": 2}), "alice")
    assert (await waiting).status is ApprovalStatus.EDITED
    first = await run(worker.ledger, worker.store, spec, call, tool, approval.approval_id)
    again = await run(worker.ledger, worker.store, spec, call, tool, approval.approval_id)
    assert (first.status, again.replayed, ran) == (CallStatus.SUCCEEDED, True, [{"amount": 2}])


async def test_a_workers_own_approval_steps_need_only_the_worker_role(
    worker: Side, reviewer: Side
) -> None:
    """The steps a worker takes on an approval outside a transaction of its own (consume,
    the expiry its wait records, cancel) read the approval (and the directory, and the
    stream) and commit fenced at the version read: all of it with `signoff_app` alone."""

    async def asked(policy: ApprovalPolicy) -> str:
        approval = await worker.store.request(
            run_id=new_run(),
            tool="refund",
            args={"amount": 9},
            call_id="c1",
            requested_by="agent",
            policy=policy,
        )
        return approval.approval_id

    approved = await asked(ApprovalPolicy())
    await reviewer.store.decide(approved, Decision.approve(), "alice")
    assert (await worker.store.consume(approved, "task-1")).consumed_by == "task-1"
    lapsing = await asked(ApprovalPolicy(expires_in=timedelta(milliseconds=200)))
    await asyncio.sleep(0.3)  # what is tested: the expiry passes by the server's clock
    assert (await worker.store.wait(lapsing, 5)).status is ApprovalStatus.EXPIRED
    withdrawn = await asked(ApprovalPolicy())
    assert (await worker.store.cancel(withdrawn, "agent")).status is ApprovalStatus.CANCELLED


async def test_a_lapsed_single_attempt_call_is_outcome_unknown_and_a_reviewer_resolves_it(
    worker: Side, reviewer: Side
) -> None:
    call = refund(new_run())
    started = asyncio.Event()

    async def hangs(args: dict[str, Any], context: CallContext) -> str:
        started.set()
        await asyncio.sleep(3600)
        return "never"

    task = asyncio.ensure_future(worker.ledger.execute(call, hangs))
    await started.wait()
    task.cancel()  # the worker dies with the call running; its lease lapses
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(1.2)  # what is tested: the lease lapses by the server's clock

    async def never(args: dict[str, Any], context: CallContext) -> str:
        raise AssertionError("a write that may have happened is not repeated")

    outcome = await worker.ledger.execute(call, never)
    assert outcome.status is CallStatus.OUTCOME_UNKNOWN
    with pytest.raises(ReviewerKekMissing):  # resolving is a person's call, signed
        await worker.ledger.resolve(call.run_id, call.call_id, succeeded=True, by="agent")
    resolved = await reviewer.ledger.resolve(call.run_id, call.call_id, succeeded=True, by="bob")
    assert resolved.status is CallStatus.SUCCEEDED


async def test_reads_retries_and_waiters_work_for_a_worker(worker: Side) -> None:
    run_id, calls = new_run(), 0

    async def read(args: dict[str, Any], context: CallContext) -> int:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.3)
        return calls

    call = ToolCall(run_id, "r1", "lookup", {"q": 1}, turn_id="t1")
    policy = ToolPolicy(effect=Effect.READ)
    first, second = await asyncio.gather(  # the second one waits for the first
        worker.ledger.execute(call, read, policy), worker.ledger.execute(call, read, policy)
    )
    assert (first.result, second.result, calls) == (1, 1, 1)


async def test_checkpoints_are_written_and_read_by_a_worker(worker: Side) -> None:
    async with encrypted_checkpointer(worker.db, worker.ring, max_size=2) as saver:
        graph = review_graph(saver)
        config: Any = {"configurable": {"thread_id": f"t-{uuid.uuid4().hex[:8]}"}}
        out = await graph.ainvoke({"messages": [HumanMessage(content="refund?")]}, config)
        assert out["__interrupt__"]
        done = await graph.ainvoke(Command(resume="yes"), config)
    assert done["note"]


async def test_the_cli_reads_and_decides_as_a_reviewer(logins: Logins, worker: Side) -> None:
    spec, call = ToolSpec("refund", approval=ApprovalPolicy()), refund(new_run())
    approval = await ask(worker.store, spec, call, "agent")
    env = kek_env()
    listed = await run_cli("approvals", "list", database_url=logins.reviewer, env=env)
    assert listed.code == 0 and approval.approval_id in listed.stdout, listed.stderr
    decided = await run_cli(
        "approvals", "decide", approval.approval_id, "--approve", "--by", "carol",
        database_url=logins.reviewer, env=env,
    )  # fmt: skip
    assert decided.code == 0, decided.stderr
    assert (await worker.store.get(approval.approval_id)).status is ApprovalStatus.APPROVED
    verified = await run_cli("ledger", "verify", database_url=logins.reviewer, env=env)
    assert verified.code == 0, verified.stderr


# -- what they cannot do ---------------------------------------------------------------------


async def test_a_worker_cannot_decide_even_with_the_reviewer_kek(
    logins: Logins, worker: Side
) -> None:
    """The signing key is the first wall, the login's rights the second: a worker that has
    stolen the reviewer-side KEK still cannot record a decision."""
    policy = ApprovalPolicy(approvers=frozenset({"mallory"}))  # the policy lets her: not the login
    spec, call = ToolSpec("refund", approval=policy), refund(new_run())
    approval = await ask(worker.store, spec, call, "agent")
    stolen = await side(logins.worker, REVIEWER_KEK)
    try:
        with pytest.raises(EventNotPermitted) as refused:
            await stolen.store.decide(approval.approval_id, Decision.approve(), "mallory")
        assert refused.value.event_type == "approval.decided"
        with pytest.raises(PermissionDenied):  # nor grant a sticky approval
            await stolen.store.grant(
                run_id=call.run_id, tool="refund", until=datetime.now(UTC) + timedelta(hours=1),
                granted_by="mallory",
            )  # fmt: skip
    finally:
        await stolen.close()
    assert (await worker.store.get(approval.approval_id)).status is ApprovalStatus.PENDING


async def test_a_reviewers_sticky_grant_approves_the_workers_next_request(
    worker: Side, reviewer: Side
) -> None:
    run_id = new_run()
    until = datetime.now(UTC) + timedelta(hours=1)
    await reviewer.store.grant(run_id=run_id, tool="refund", until=until, granted_by="alice")
    spec, call = ToolSpec("refund", approval=ApprovalPolicy()), refund(run_id)
    approval = await ask(worker.store, spec, call, "agent")
    assert approval.status is ApprovalStatus.APPROVED

    async def tool(args: dict[str, Any], context: CallContext) -> str:
        return "refunded"

    outcome = await run(worker.ledger, worker.store, spec, call, tool, approval.approval_id)
    assert outcome.status is CallStatus.SUCCEEDED


async def test_a_reviewer_cannot_run_tools(reviewer: Side) -> None:
    async def tool(args: dict[str, Any], context: CallContext) -> str:
        raise AssertionError("never runs")

    with pytest.raises(EventNotPermitted):
        await reviewer.ledger.execute(refund(new_run()), tool)


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE tool_calls SET status = 'running', effect = 'read', lease_until = now()",
        "UPDATE approvals SET consumed_at = NULL",
        "UPDATE approvals SET status = 'approved'",
        "DELETE FROM tool_calls",
        "UPDATE data_keys SET public_key = NULL",
        "INSERT INTO events (txid, stream_id, version, type, data, actor, recorded_at, hash)"
        " VALUES ('999999999'::xid8, 'x:1', 1, 't', '{}', 'a', now(), sha256(''))",
        "INSERT INTO approval_grants VALUES ('g', 'r', 't', 'm', now(), now())",
        "INSERT INTO event_rights VALUES ('%', 'signoff_app')",
    ],
)
async def test_no_table_is_written_directly_by_a_worker(worker: Side, statement: str) -> None:
    with pytest.raises(PermissionDenied):
        async with worker.db.connection() as conn:
            await conn.execute(statement)


async def forge(conn: asyncpg.Connection, function: str, *args: Any) -> Any:
    return await conn.fetchval(f"SELECT {function}", *args)


async def test_a_worker_cannot_append_a_decision_or_a_grant_with_sql_of_its_own(
    worker: Side,
) -> None:
    spec, call = ToolSpec("refund", approval=ApprovalPolicy()), refund(new_run())
    approval = await ask(worker.store, spec, call, "agent")
    stream = f"approval:{approval.approval_id}"
    decided = json.dumps({"decision": "approve", "reviewer": "mallory", "final": True})
    async with worker.db.connection() as conn:
        with pytest.raises(asyncpg.PostgresError) as refused:
            await conn.fetchval(
                "SELECT signoff_append($1, 1, ARRAY['approval.decided'], ARRAY[$2::json],"
                " ARRAY['mallory'], NULL)",
                stream,
                decided,
            )
        assert refused.value.sqlstate == "SG401"
        with pytest.raises(asyncpg.PostgresError) as refused:
            await conn.fetchval(
                "SELECT signoff_grant('g1', 'r', 'refund', 'mallory', now(), now(), '{}')"
            )
        assert refused.value.sqlstate == "42501"
    assert await Journal(worker.db).stream_version(stream) == 1


async def test_a_worker_cannot_move_a_row_past_its_events(worker: Side) -> None:
    """The write function keeps a row in step: a consumption event cannot carry an approval
    to `approved`, nor a retry a call to `succeeded`."""
    spec, call = ToolSpec("refund", approval=ApprovalPolicy()), refund(new_run())
    approval = await ask(worker.store, spec, call, "agent")
    async with worker.db.connection() as conn:
        row = await conn.fetchrow(
            "SELECT to_jsonb(a) - 'version' AS row FROM approvals a WHERE approval_id = $1",
            approval.approval_id,
        )
        forged = json.loads(row["row"]) | {
            "status": "approved",
            "decided_by": ["mallory"],
            "consumed_by": "x",
            "consumed_at": "2026-01-01T00:00:00+00:00",
        }
        with pytest.raises(asyncpg.PostgresError) as refused:
            await conn.fetchval(
                with_row(
                    "SELECT signoff_commit_approval(false, $1::jsonb, $2, 1,"
                    " ARRAY['approval.consumed'], ARRAY['{}'::json], ARRAY['x'], NULL)"
                ),
                json.dumps(forged),
                f"approval:{approval.approval_id}",
            )
        assert refused.value.sqlstate == "SG422"
    assert (await worker.store.get(approval.approval_id)).status is ApprovalStatus.PENDING


async def test_rows_out_of_step_are_refused_as_typed_errors(worker: Side) -> None:
    run_id = new_run()
    stream = call_stream(run_id, "c1")
    row = {"run_id": run_id, "call_id": "c1", "status": "succeeded"}
    with pytest.raises(RowOutOfStep):
        async with worker.db.connection() as conn:
            await conn.fetchval(
                with_row(
                    "SELECT signoff_commit_call(true, $1::jsonb, ''::bytea, NULL, 1, NULL, NULL,"
                    " $2, 0, ARRAY['call.started'], ARRAY['{}'::json], ARRAY['w'], NULL)"
                ),
                json.dumps(row),
                stream,
            )


# -- ids -----------------------------------------------------------------------------------


async def test_two_calls_never_share_a_stream(worker: Side) -> None:
    """(run `tenant-a/session`, call `c1`) and (run `tenant-a`, call `session/c1`) used to share
    the stream `call:tenant-a/session/c1`."""
    base = new_run()
    first = ToolCall(f"{base}/session", "c1", "refund", {"amount": 1}, turn_id="t1")
    second = ToolCall(base, "session/c1", "refund", {"amount": 2}, turn_id="t1")
    assert call_stream(first.run_id, first.call_id) != call_stream(second.run_id, second.call_id)
    ran: list[int] = []

    async def tool(args: dict[str, Any], context: CallContext) -> int:
        ran.append(args["amount"])
        return int(args["amount"])

    outcomes = [await worker.ledger.execute(c, tool) for c in (first, second)]
    assert [o.result for o in outcomes] == [1, 2] and ran == [1, 2]
    journal = Journal(worker.db)
    for c in (first, second):
        events = await journal.read_stream(call_stream(c.run_id, c.call_id))
        assert [e.type for e in events] == ["call.started", "call.succeeded"]
        assert events[0].data["call_id"] == c.call_id
    assert (
        await count(worker.db, "SELECT count(*) FROM tool_calls WHERE run_id LIKE $1", base + "%")
        == 2
    )


# -- adapters ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(Kind))
async def test_a_langgraph_agent_runs_on_a_worker_login_and_pauses_for_a_reviewer(
    logins: Logins, worker: Side, reviewer: Side, kind: Kind
) -> None:
    """create_agent with the middleware and a custom StateGraph with the tool node, on a worker
    login: they ask, checkpoint, pause; the reviewer side decides in the store; the worker
    resumes with nothing (`"continue"`) and with a signed token, and the refund runs once."""
    async with await Database.connect(logins.owner) as owner, owner.connection() as conn:
        await conn.execute(EFFECTS_TABLE)
        await conn.execute("GRANT SELECT, INSERT ON agent_effects TO signoff_app")
    async with encrypted_checkpointer(worker.db, worker.ring, max_size=2) as saver:
        harness = Harness(worker.db, worker.ring, worker.store, worker.ledger, saver)
        for resume in ("continue", "token"):
            thread_id = f"lp-{kind.value}-{resume}-{uuid.uuid4().hex[:8]}"
            graph, _ = harness.agent(kind, "refund")
            config = thread(thread_id)
            await graph.ainvoke({"messages": [HumanMessage(content="refund A7")]}, config)
            [request] = requests_of(list((await graph.aget_state(config)).interrupts))
            await reviewer.store.decide(request["approval_id"], Decision.approve(), "alice")
            value: Any = Command(resume="continue")
            if resume == "token":
                token = await reviewer.store.issue_token(request["approval_id"])
                interrupts = list((await graph.aget_state(config)).interrupts)
                value = answer_all(interrupts, token)
            await graph.ainvoke(value, config)
            refunds = await effects_of(worker.db, thread_id, "refund")
            assert [e["args"] for e in refunds] == [{"order_id": "A7", "amount": 120}]


async def test_dex_steps_run_on_a_worker_login_and_the_decide_rpc_on_a_reviewers(
    worker: Side, reviewer: Side
) -> None:
    """The Steps' logic (ask, wait, call) is the worker's; the decide RPC's is the reviewer
    side's, and on a worker login it records nothing."""
    ran: list[dict[str, Any]] = []

    async def refund_tool(args: dict[str, Any], context: CallContext) -> str:
        ran.append(args)
        return "refunded"

    tool = DexTool(ToolSpec("refund", approval=ApprovalPolicy()), refund_tool)
    flow_id, request = new_run(), ToolCallRequest("c1", "refund", {"amount": 3})
    waiting = await await_approval(worker.store, flow_id, request, tool.spec)
    assert not waiting.ready
    approval = await worker.store.get(waiting.approval_id)
    decide = DecideRequest.of(approval, Decision.approve(), "alice")
    with pytest.raises(ReviewerKekMissing):
        await decide_for_flow(worker.store, flow_id, decide)
    assert (
        await decide_for_flow(reviewer.store, flow_id, decide)
    ).status is ApprovalStatus.APPROVED
    result = await call_tool(worker.ledger, worker.store, flow_id, request, tool)
    again = await call_tool(worker.ledger, worker.store, flow_id, request, tool)
    assert (result.status, again.status, ran) == ("succeeded", "succeeded", [{"amount": 3}])


async def test_a_welt_agent_process_records_answers_only_with_the_reviewer_role(
    logins: Logins, worker: Side
) -> None:
    """Welt hands the person's answer to the agent's own process: with `signoff_app` alone
    (even holding the reviewer KEK) it records nothing; with `signoff_reviewer` too, it records
    the Slack user's decision."""
    payload = json.loads((WELT_FIXTURES / "answer_approve.json").read_text())
    answers: list[AnswerOutcome] = []
    for roles in (("signoff_app",), ("signoff_app", "signoff_reviewer")):
        spec, call = ToolSpec("refund", approval=ApprovalPolicy()), refund(new_run())
        approval = await ask(worker.store, spec, call, "agent")
        async with temporary_login(logins.owner, *roles) as url:
            agent = await side(url, REVIEWER_KEK)
            try:
                parsed = parse_interrupt_responses(addressed(payload, approval.approval_id))
                if roles == ("signoff_app",):
                    with pytest.raises(EventNotPermitted):
                        await record_answers(agent.store, parsed, slack_reviewer("slack:T1:U1"))
                else:
                    answers = await record_answers(
                        agent.store, parsed, slack_reviewer("slack:T1:U1")
                    )
            finally:
                await agent.close()
    assert [a.status for a in answers] == [AnswerStatus.DECIDED]


# -- what a worker's own SQL cannot do through the write functions ------------------------


async def test_a_temporary_table_does_not_shadow_the_rights(worker: Side) -> None:
    """A SECURITY DEFINER function searches `pg_temp` first unless it is listed last: a
    worker's own temporary `event_rights` would otherwise grant it every event type."""
    spec, call = ToolSpec("refund", approval=ApprovalPolicy()), refund(new_run())
    approval = await ask(worker.store, spec, call, "agent")
    async with worker.db.connection() as conn, conn.transaction():
        await conn.execute(
            "CREATE TEMP TABLE event_rights (type_pattern text, role name, when_field text)"
        )
        await conn.execute("INSERT INTO event_rights VALUES ('%', 'signoff_app', '')")
        row = await conn.fetchrow(
            "SELECT to_jsonb(a) AS row FROM approvals a WHERE approval_id = $1",
            approval.approval_id,
        )
        forged = json.loads(row["row"]) | {"status": "approved", "decided_by": ["mallory"]}
        forged["reviews"] = [{"reviewer": "mallory", "decision": "approve", "at": "2026-01-01"}]
        with pytest.raises(asyncpg.PostgresError) as refused:
            await conn.fetchval(
                with_row(
                    "SELECT signoff_commit_approval(false, $1::jsonb, $2, 1,"
                    " ARRAY['approval.decided'], ARRAY['{}'::json], ARRAY['mallory'], NULL)"
                ),
                json.dumps(forged),
                f"approval:{approval.approval_id}",
            )
        assert refused.value.sqlstate == "SG401"
    assert (await worker.store.get(approval.approval_id)).status is ApprovalStatus.PENDING


async def test_a_decision_cannot_rewrite_the_reviews_before_it(
    worker: Side, reviewer: Side
) -> None:
    """A second decision's row must keep the first decision's review as it was: a reviewer
    login's own SQL cannot swap who gave the first vote while adding its own."""
    spec = ToolSpec("refund", approval=ApprovalPolicy(quorum=2, any_reviewer=True))
    approval = await ask(worker.store, spec, refund(new_run()), "agent")
    await decide_once(reviewer.store, approval.approval_id, Decision.approve(), "alice")
    async with reviewer.db.connection() as conn:
        row = json.loads(
            await conn.fetchval(
                "SELECT to_jsonb(a) FROM approvals a WHERE approval_id = $1", approval.approval_id
            )
        )
        first = row["reviews"][0]
        second = first | {"reviewer": "bob"}
        for reviews in ([first | {"reviewer": "mallory"}, second], [second, first]):
            forged = row | {"reviews": reviews}
            with pytest.raises(asyncpg.PostgresError) as refused:
                await conn.fetchval(
                    with_row(
                        "SELECT signoff_commit_approval(false, $1::jsonb, $2, $3,"
                        " ARRAY['approval.decided'], ARRAY['{\"signature\": {}}'::json],"
                        " ARRAY['bob'], NULL)"
                    ),
                    json.dumps(forged),
                    f"approval:{approval.approval_id}",
                    row["version"],
                )
            assert refused.value.sqlstate == "SG422"
    assert [r.reviewer for r in (await worker.store.get(approval.approval_id)).reviews] == ["alice"]


async def test_a_finished_call_cannot_be_started_again_through_the_functions(
    worker: Side,
) -> None:
    call = refund(new_run())
    runs: list[int] = []

    async def tool(args: dict[str, Any], context: CallContext) -> str:
        runs.append(1)
        return "refunded"

    assert (await worker.ledger.execute(call, tool)).status is CallStatus.SUCCEEDED
    stream = call_stream(call.run_id, call.call_id)
    async with worker.db.connection() as conn:
        row = json.loads(
            await conn.fetchval(
                "SELECT to_jsonb(t) - 'args_sealed' - 'result_sealed' FROM tool_calls t"
                " WHERE run_id = $1",
                call.run_id,
            )
        )
        again = row | {"status": "running", "effect": "read"}
        for types in (["call.started"], ["call.retried"]):
            written = await conn.fetchval(
                with_row(
                    "SELECT signoff_commit_call(false, $1::jsonb, NULL, NULL, 1,"
                    " sha256('a token of its own'), NULL, $2, $3, $4, ARRAY['{}'::json],"
                    " ARRAY['w'],"
                    " NULL)"
                ),
                json.dumps(again),
                stream,
                row["version"],
                types,
            )
            assert written is None  # a finished call's row does not move
        with pytest.raises(asyncpg.PostgresError) as refused:  # nor its stream, alone
            await conn.fetchval(
                "SELECT signoff_append($1, $2, ARRAY['call.started'], ARRAY['{}'::json],"
                " ARRAY['w'], NULL)",
                stream,
                row["version"],
            )
        assert refused.value.sqlstate == "SG401"
    again_outcome = await worker.ledger.execute(call, tool)
    assert (again_outcome.status, again_outcome.replayed, runs) == (
        CallStatus.SUCCEEDED,
        True,
        [1],
    )


async def test_a_consumption_cannot_be_undone_nor_a_grant_claimed_without_one(
    worker: Side, reviewer: Side
) -> None:
    spec, call = ToolSpec("refund", approval=ApprovalPolicy()), refund(new_run())
    approval = await ask(worker.store, spec, call, "agent")
    await decide_once(reviewer.store, approval.approval_id, Decision.approve(), "alice")

    async def tool(args: dict[str, Any], context: CallContext) -> str:
        return "refunded"

    await run(worker.ledger, worker.store, spec, call, tool, approval.approval_id)
    consumed = await worker.store.get(approval.approval_id)
    stream = f"approval:{approval.approval_id}"
    async with worker.db.connection() as conn:
        row = json.loads(
            await conn.fetchval(
                "SELECT to_jsonb(a) FROM approvals a WHERE approval_id = $1", approval.approval_id
            )
        )
        undone = row | {"consumed_at": None, "consumed_by": None}
        with pytest.raises(asyncpg.PostgresError) as refused:
            await conn.fetchval(
                with_row(
                    "SELECT signoff_commit_approval(false, $1::jsonb, $2, $3,"
                    " ARRAY['approval.consumed'], ARRAY['{}'::json], ARRAY['x'], NULL)"
                ),
                json.dumps(undone),
                stream,
                consumed.version,
            )
        assert refused.value.sqlstate == "SG422"
        other = await ask(worker.store, spec, refund(new_run()), "agent")
        claimed = json.loads(
            await conn.fetchval(
                "SELECT to_jsonb(a) FROM approvals a WHERE approval_id = $1", other.approval_id
            )
        ) | {"status": "approved", "decided_by": ["boss"]}
        claimed["reviews"] = [{"reviewer": "boss", "decision": "approve", "at": "2026-01-01"}]
        with pytest.raises(asyncpg.PostgresError) as refused:  # `grant` must be a signed grant
            await conn.fetchval(
                with_row(
                    "SELECT signoff_commit_approval(false, $1::jsonb, $2, 1,"
                    " ARRAY['approval.decided'], ARRAY[$3::json], ARRAY['boss'], NULL)"
                ),
                json.dumps(claimed),
                f"approval:{other.approval_id}",
                json.dumps({"grant": None}),
            )
        assert refused.value.sqlstate == "SG401"
    assert (await worker.store.get(approval.approval_id)).consumed_at == consumed.consumed_at


async def test_a_call_names_no_approval_nor_reviewer_that_did_not_allow_it(
    worker: Side, reviewer: Side
) -> None:
    """A new call's row and `call.started` event used to carry whatever approval and reviewers
    the worker gave: `--approved-by alice` then listed calls alice never saw."""
    spec, call = ToolSpec("refund", approval=ApprovalPolicy()), refund(new_run())
    approval = await ask(worker.store, spec, call, "agent")
    await decide_once(reviewer.store, approval.approval_id, Decision.approve(), "alice")

    async def tool(args: dict[str, Any], context: CallContext) -> str:
        return "refunded"

    await run(worker.ledger, worker.store, spec, call, tool, approval.approval_id)
    async with worker.db.connection() as conn:
        real = json.loads(
            await conn.fetchval(
                "SELECT to_jsonb(t) - 'args_sealed' - 'result_sealed' FROM tool_calls t"
                " WHERE run_id = $1",
                call.run_id,
            )
        )
        assert real["approved_by"] == ["alice"]
        forged_run = new_run()
        no_approval = {"approval_id": None, "approval_stream": None}
        someone_elses: dict[str, Any] = {}  # the real approval, consumed by the real call
        for named in (no_approval, someone_elses):
            row = real | named | {"run_id": forged_run, "status": "running", "attempts": 1}
            data = {k: row[k] for k in ("run_id", "call_id", "approval_id", "approved_by")}
            with pytest.raises(asyncpg.PostgresError) as refused:
                await conn.fetchval(
                    with_row(
                        "SELECT signoff_commit_call(true, $1::jsonb, ''::bytea, NULL, 60,"
                        " sha256('a token of its own'), NULL, $2, 0, ARRAY['call.started'],"
                        " ARRAY[$3::json], ARRAY['w'], NULL)"
                    ),
                    json.dumps(row),
                    call_stream(forged_run, row["call_id"]),
                    json.dumps(data),
                )
            assert refused.value.sqlstate == "SG422"
        listed = await conn.fetch(
            "SELECT run_id FROM tool_calls WHERE 'alice' = ANY(approved_by) AND run_id LIKE 'lp-%'"
        )
    assert forged_run not in {r["run_id"] for r in listed}


async def test_a_worker_cannot_cut_another_workers_lease(worker: Side) -> None:
    """A renewal used to set the lease to what the caller asked: one second, and another worker
    took the call over while it still ran."""
    ledger = ToolLedger(worker.db, worker.ring, lease_seconds=60.0)
    call, started, release = refund(new_run()), asyncio.Event(), asyncio.Event()

    async def tool(args: dict[str, Any], context: CallContext) -> str:
        started.set()
        await release.wait()
        return "refunded"

    running = asyncio.create_task(ledger.execute(call, tool))
    try:
        await asyncio.wait_for(started.wait(), 30)
        sql = "SELECT lease_until, version FROM tool_calls WHERE run_id = $1"
        async with worker.db.connection() as conn:
            before = await conn.fetchrow(sql, call.run_id)
            await conn.fetchval(
                "SELECT signoff_renew_leases($1, $2, $3, $4, 1)",
                [call.run_id],
                [call.call_id],
                [before["version"]],
                [b"not the holder's token"],
            )
            after = await conn.fetchrow(sql, call.run_id)
        assert after["lease_until"] >= before["lease_until"]
        assert after["lease_until"] > datetime.now(UTC) + timedelta(seconds=30)
    finally:
        release.set()
        await running
        await ledger.close()


async def test_a_worker_on_a_database_without_keys_is_told_who_makes_them(
    server_url: str,
) -> None:
    """The worker's ring used to fail with "permission denied for function
    signoff_key_create", which named neither the missing keys nor the way out."""
    async with (
        scratch_database(server_url, prefix="signoff_nokeys") as owner,
        temporary_login(owner, "signoff_app") as login,
    ):
        settings = Settings(database_url=login, kek=LocalKek(TEST_KEK))
        async with await Database.connect(login, settings=settings) as db:
            with pytest.raises(NoActiveKey) as missing:
                await KeyRing.open(db)
        assert not missing.value.may_create
        assert "value_mac" in str(missing.value)
        assert "`signoff keys init` as the owner or a key administrator" in str(missing.value)
        async with await Database.connect(owner) as db:  # the owner may, and nothing was made
            assert await count(db, "SELECT count(*) FROM data_keys") == 0
