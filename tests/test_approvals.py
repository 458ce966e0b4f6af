"""Approvals: idempotent requests, policies, quorum, expiry, single use across processes."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import Awaitable
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from approvals import (
    NOTIFY_CHANNEL,
    REQUESTS_CHANNEL,
    ApprovalAlreadyDecided,
    ApprovalExpired,
    ApprovalPending,
    ApprovalPolicy,
    ApprovalStatus,
    ApprovalStore,
    Decision,
    DecisionKind,
    DecisionNotAllowed,
    InvalidApprovalRequest,
    Reviewer,
    ReviewerDirectory,
    TokenBindingMismatch,
    TokenForged,
    TokenMalformed,
    UnknownApproval,
    _sql,
)
from ledger.canonical import canonical_json
from ledger.errors import UnknownKey, VersionConflict
from ledger.journal import Journal
from ledger.keys import KeyRing
from ledger.store import Database

from .support.activity import listeners
from .support.until import until


async def ask(store: ApprovalStore, policy: ApprovalPolicy | None = None, **over: object) -> str:
    fields: dict[str, object] = {
        "run_id": f"run-{uuid.uuid4().hex[:8]}",
        "tool": "refund",
        "args": {"order": "A-1", "amount": 120},
        "call_id": "call-1",
        "requested_by": "agent",
        "policy": policy,
    }
    fields.update(over)
    approval = await store.request(**fields)  # type: ignore[arg-type]
    return approval.approval_id


async def test_requests_are_idempotent_and_arguments_are_sealed(
    store: ApprovalStore, db: Database
) -> None:
    run = f"run-{uuid.uuid4().hex[:8]}"
    first = await store.request(
        run_id=run,
        tool="refund",
        args={"amount": 120, "note": "SECRET-ARG"},
        call_id="c1",
        requested_by="agent",
    )
    again = await store.request(
        run_id=run,
        tool="refund",
        args={"note": "SECRET-ARG", "amount": 120},
        call_id="c1",
        requested_by="agent",
    )
    other = await store.request(
        run_id=run, tool="refund", args={"amount": 121}, call_id="c1", requested_by="agent"
    )
    assert first.approval_id == again.approval_id != other.approval_id
    assert first.status is ApprovalStatus.PENDING
    events = await Journal(db).read_stream(f"approval:{first.approval_id}")
    assert [e.type for e in events] == ["approval.requested"]
    assert "SECRET-ARG" not in events[0].data_json
    revealed = await store.get(first.approval_id, reveal=True)
    assert revealed.args == {"amount": 120, "note": "SECRET-ARG"}


async def test_a_request_finds_itself_by_run_and_call_id_not_by_reading_its_run(
    store: ApprovalStore, db: Database
) -> None:
    """The lookup every new request makes could use an index of the run alone, reading all
    the run's approvals before writing (the planner chose it on fresh statistics); the
    request's own unique index is the only one left for it."""
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    for n in range(3):
        await ask(store, run_id=run_id, call_id=f"call-{n}")
    async with db.connection() as conn, conn.transaction():
        await conn.execute("SET LOCAL enable_seqscan = off")  # a tiny table: as if it were large
        plan = await conn.fetchval(
            "EXPLAIN (FORMAT JSON) " + _sql.BY_REQUEST, run_id, "call-1", ["digest"]
        )
    conditions = [node.get("Index Cond", "") for node in _plan_nodes(json.loads(plan)[0]["Plan"])]
    assert any("run_id" in c and "call_id" in c for c in conditions), conditions


def _plan_nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [node, *(n for child in node.get("Plans", []) for n in _plan_nodes(child))]


async def test_approve_then_consume_once(store: ApprovalStore) -> None:
    approval_id = await ask(store)
    with pytest.raises(ApprovalPending):
        await store.consume(approval_id, "task-1")
    decided = await store.decide(approval_id, Decision.approve(), "alice")
    assert (decided.status, decided.decided_by) == (ApprovalStatus.APPROVED, ("alice",))
    used = await store.consume(approval_id, "task-1")
    assert used.decision == Decision.approve()
    with pytest.raises(ApprovalAlreadyDecided):
        await store.consume(approval_id, "task-2")
    with pytest.raises(ApprovalAlreadyDecided):
        await store.decide(approval_id, Decision.reject("late"), "bob")


@pytest.mark.parametrize(
    ("decision", "status"),
    [
        (Decision.reject("too large"), ApprovalStatus.REJECTED),
        (Decision.edit({"order": "A-1", "amount": 100}), ApprovalStatus.EDITED),
        (Decision.respond("call the customer first"), ApprovalStatus.RESPONDED),
    ],
)
async def test_each_decision_is_returned_when_consumed(
    store: ApprovalStore, decision: Decision, status: ApprovalStatus
) -> None:
    approval_id = await ask(store)
    assert (await store.decide(approval_id, decision, "alice")).status is status
    assert (await store.consume(approval_id, "task")).decision == decision


async def test_quorum_needs_distinct_reviewers_and_one_reject_denies(store: ApprovalStore) -> None:
    approval_id = await ask(store, ApprovalPolicy(quorum=2, any_reviewer=True))
    assert (await store.decide(approval_id, Decision.approve(), "alice")).status is (
        ApprovalStatus.PENDING
    )
    with pytest.raises(DecisionNotAllowed, match="approved already"):
        await store.decide(approval_id, Decision.approve(), "alice")
    assert (await store.get(approval_id)).status is ApprovalStatus.PENDING
    done = await store.decide(approval_id, Decision.approve(), "bob")
    assert (done.status, done.decided_by) == (ApprovalStatus.APPROVED, ("alice", "bob"))

    denied = await ask(store, ApprovalPolicy(quorum=3, any_reviewer=True))
    await store.decide(denied, Decision.approve(), "alice")
    assert (await store.decide(denied, Decision.reject("no"), "bob")).status is (
        ApprovalStatus.REJECTED
    )


async def test_policy_rules(store: ApprovalStore) -> None:
    approval_id = await ask(store, ApprovalPolicy(approvers=frozenset({"alice", "group:finance"})))
    with pytest.raises(DecisionNotAllowed, match="not an approver"):
        await store.decide(approval_id, Decision.approve(), "mallory")
    with pytest.raises(DecisionNotAllowed, match="may not decide"):
        await store.decide(approval_id, Decision.approve(), "agent")
    carol = f"carol-{uuid.uuid4().hex[:8]}"
    with pytest.raises(InvalidApprovalRequest, match="groups come from the reviewer directory"):
        await store.decide(approval_id, Decision.approve(), Reviewer(carol, frozenset({"finance"})))
    await ReviewerDirectory(store.db).add(carol, ["finance"], by="admin")
    by_group = await store.decide(approval_id, Decision.approve(), carol)
    assert by_group.status is ApprovalStatus.APPROVED
    assert by_group.reviews[-1].reviewer == carol

    only_yes_no = ApprovalPolicy(allowed=frozenset({DecisionKind.APPROVE, DecisionKind.REJECT}))
    limited = await ask(store, only_yes_no)
    with pytest.raises(DecisionNotAllowed, match="does not allow edit"):
        await store.decide(limited, Decision.edit({"amount": 1}), "alice")
    self_ok = await ask(
        store, ApprovalPolicy(approvers=frozenset({"agent"}), allow_self_approval=True)
    )
    assert (await store.decide(self_ok, Decision.approve(), "agent")).status is (
        ApprovalStatus.APPROVED
    )


async def test_an_expired_request_is_denied(store: ApprovalStore) -> None:
    approval_id = await ask(store, ApprovalPolicy(expires_in=timedelta(milliseconds=50)))
    await asyncio.sleep(0.1)  # what is tested: the expiry passes by the server's clock
    with pytest.raises(ApprovalExpired):
        await store.decide(approval_id, Decision.approve(), "alice")
    assert (await store.get(approval_id)).status is ApprovalStatus.EXPIRED
    used = await store.consume(approval_id, "task")
    assert used.decision is not None and used.decision.kind is DecisionKind.REJECT


async def test_sticky_grant_approves_later_requests(store: ApprovalStore) -> None:
    run = f"run-{uuid.uuid4().hex[:8]}"
    until = datetime.now(UTC) + timedelta(minutes=5)
    await store.grant(run_id=run, tool="lookup", until=until, granted_by="alice")
    granted = await store.request(
        run_id=run, tool="lookup", args={"q": 1}, call_id="c9", requested_by="agent"
    )
    assert (granted.status, granted.decided_by) == (ApprovalStatus.APPROVED, ("alice",))
    other_tool = await store.request(
        run_id=run, tool="refund", args={"q": 1}, call_id="c10", requested_by="agent"
    )
    assert other_tool.status is ApprovalStatus.PENDING


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda s: s.decide("apr-missing", Decision.approve(), "alice"), UnknownApproval),
        (lambda s: s.consume("apr-missing", "task"), UnknownApproval),
        (lambda s: s.get("apr-missing"), UnknownApproval),
    ],
)
async def test_unknown_approval_ids(store: ApprovalStore, call: object, error: type) -> None:
    with pytest.raises(error):
        await call(store)  # type: ignore[operator]


async def test_malformed_input_records_nothing(store: ApprovalStore, db: Database) -> None:
    approval_id = await ask(store)
    version = await Journal(db).stream_version(f"approval:{approval_id}")
    with pytest.raises(InvalidApprovalRequest, match="JSON object"):
        await store.decide(approval_id, Decision.edit(["not", "an", "object"]), "alice")  # type: ignore[arg-type]
    with pytest.raises(InvalidApprovalRequest, match="not JSON"):
        await store.decide(approval_id, Decision.edit({"x": {1, 2}}), "alice")
    with pytest.raises(InvalidApprovalRequest):
        await store.decide(approval_id, Decision.respond(""), "alice")
    with pytest.raises(InvalidApprovalRequest):
        await ask(store, args=["a list"])
    assert await Journal(db).stream_version(f"approval:{approval_id}") == version
    assert (await store.get(approval_id)).status is ApprovalStatus.PENDING


async def test_wait_wakes_on_a_decision(store: ApprovalStore) -> None:
    approval_id = await ask(store)

    async def decide_later() -> None:
        await asyncio.sleep(0.2)  # lets the wait start first (it must end decided either way)
        await store.decide(approval_id, Decision.approve(), "alice")

    task = asyncio.create_task(decide_later())
    waited = await store.wait(approval_id, 5)
    await task
    assert waited.status is ApprovalStatus.APPROVED
    pending = await ask(store)
    assert (await store.wait(pending, 0.3)).status is ApprovalStatus.PENDING


async def test_tokens_verify_only_for_their_call_and_only_until_consumed(
    store: ApprovalStore,
) -> None:
    run = f"run-{uuid.uuid4().hex[:8]}"
    args = {"order": "A-1", "amount": 120}
    approval = await store.request(
        run_id=run, tool="refund", args=args, call_id="c1", requested_by="agent"
    )
    with pytest.raises(ApprovalPending):
        await store.issue_token(approval.approval_id)
    await store.decide(approval.approval_id, Decision.approve(), "alice")
    token = await store.issue_token(approval.approval_id)
    call = {"run_id": run, "tool": "refund", "args": args, "call_id": "c1"}
    assert (await store.verify_token(token, **call)).approval_id == approval.approval_id  # type: ignore[arg-type]

    for other in (
        {"run_id": "other"},
        {"tool": "delete"},
        {"args": {"amount": 1}},
        {"call_id": "c2"},
    ):
        with pytest.raises(TokenBindingMismatch):
            await store.verify_token(token, **{**call, **other})  # type: ignore[arg-type]
    prefix, body, mac = token.split(".")
    forged_mac = mac[:-2] + ("AA" if mac[-2:] != "AA" else "BB")
    with pytest.raises(TokenForged):
        await store.verify_token(f"{prefix}.{body}.{forged_mac}", **call)  # type: ignore[arg-type]
    with pytest.raises(TokenMalformed):
        await store.verify_token("not-a-token", **call)  # type: ignore[arg-type]
    fields = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    fields["key_id"] = "mac-00000000000000aa"
    other_key = base64.urlsafe_b64encode(canonical_json(fields).encode()).rstrip(b"=").decode()
    with pytest.raises(UnknownKey):
        await store.verify_token(f"{prefix}.{other_key}.{mac}", **call)  # type: ignore[arg-type]

    await store.consume(approval.approval_id, "task-1")
    with pytest.raises(ApprovalAlreadyDecided):
        await store.verify_token(token, **call)  # type: ignore[arg-type]


async def test_consume_inside_a_rolled_back_transaction_uses_nothing(
    store: ApprovalStore, db: Database
) -> None:
    approval_id = await ask(store)
    await store.decide(approval_id, Decision.approve(), "alice")
    with pytest.raises(RuntimeError, match="tool intent failed"):
        async with db.transaction() as conn:
            await store.consume(approval_id, "task-1", connection=conn)
            raise RuntimeError("tool intent failed")
    assert not (await store.get(approval_id)).consumed
    assert (await store.consume(approval_id, "task-2")).consumed_by == "task-2"


_WAITS_FOR = "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid)))"


async def test_a_consumer_that_waited_for_the_lock_finds_the_decision_used(
    store: ApprovalStore, db: Database
) -> None:
    """The second consumer's statement read the stream before the first one committed, and
    locked the row after: it reads the stream again, so it finds the decision used rather
    than a row its (stale) stream does not prove."""
    approval_id = await ask(store)
    await store.decide(approval_id, Decision.approve(), "alice")
    async with db.transaction() as conn:
        await store.consume(approval_id, "task-1", connection=conn)
        pid = await conn.fetchval("SELECT pg_backend_pid()")
        second = asyncio.create_task(store.consume(approval_id, "task-2"))
        deadline = asyncio.get_running_loop().time() + 30
        while not await conn.fetchval(_WAITS_FOR, pid):  # the second consumer waits for us
            assert asyncio.get_running_loop().time() < deadline, "no consumer waited"
            await asyncio.sleep(0.01)
    with pytest.raises(ApprovalAlreadyDecided):
        await second
    assert (await store.get(approval_id)).consumed_by == "task-1"


async def test_a_decision_and_a_consumption_are_one_read_and_one_write_each(
    database_url: str, store: ApprovalStore, ring: KeyRing
) -> None:
    """No transaction, no lock: each step reads the approval and commits fenced at the version
    it read (two round trips, where BEGIN, a locked read, the write and COMMIT were four)."""
    policy = ApprovalPolicy(approvers=frozenset({"group:leads"}))
    await ReviewerDirectory(store.db).add("lead-1", ["leads"], by="admin")
    async with await Database.connect(database_url, pool_size=1) as own:
        counted = ApprovalStore(own, ring)
        sent: list[str] = []
        async with own.connection() as conn:  # the pool's one connection
            conn.add_query_logger(lambda logged: sent.append(logged.query))
        steps: dict[str, list[str]] = {}
        for approval_id in (await ask(store, policy), await ask(store, policy)):
            # The first round also prepares the statements (and asyncpg reads their types).
            for step, act in (
                ("decide", counted.decide(approval_id, Decision.approve(), "lead-1")),
                ("consume", counted.consume(approval_id, "task-1")),
            ):
                await act
                await asyncio.sleep(0)  # the logger is called soon after each statement
                steps[step], sent[:] = list(sent), []
    assert (await store.get(approval_id)).consumed_by == "task-1"
    for step, statements in steps.items():
        assert len(statements) == 2, (step, [s.strip()[:60] for s in statements])
        assert not any(s.strip().rstrip(";").upper() in ("BEGIN", "COMMIT") for s in statements)
    assert await store.problems(approval_id) == []


async def test_a_new_request_wakes_feeds_not_the_agents_waiting_for_decisions(
    database_url: str, store: ApprovalStore
) -> None:
    """A new request is notified on a channel of its own: on the decisions' channel it woke
    the agent that had just made it (a read for nothing on every request)."""
    heard: list[tuple[str, str]] = []
    conn = await asyncpg.connect(database_url)
    try:
        for channel in (NOTIFY_CHANNEL, REQUESTS_CHANNEL):
            await conn.add_listener(
                channel, lambda _c, _p, ch, payload: heard.append((ch, payload))
            )
        approval_id = await ask(store)
        await store.decide(approval_id, Decision.approve(), "lead-1")
        await store.consume(approval_id, "task-1")
        stream = f"approval:{approval_id}"
        # Notifications arrive in commit order: once one sent after the consumption is heard,
        # everything the three steps notified has been heard too.
        await conn.execute("SELECT pg_notify($1, 'after')", NOTIFY_CHANNEL)
        await until(lambda: (NOTIFY_CHANNEL, "after") in heard, what="the later notification")
    finally:
        await conn.close()
    assert heard == [
        (REQUESTS_CHANNEL, stream),
        (NOTIFY_CHANNEL, stream),
        (NOTIFY_CHANNEL, "after"),
    ]


async def test_a_wait_right_after_its_own_request_reads_only_once_woken(
    database_url: str, store: ApprovalStore, ring: KeyRing
) -> None:
    """The store that made a request, its listener listening since before, knows the request
    is pending while nothing was notified: its wait reads nothing until a decision wakes it."""
    async with await Database.connect(database_url, pool_size=1) as own:
        agent = ApprovalStore(own, ring)
        sent: list[str] = []
        async with own.connection() as conn:  # the pool's one connection
            conn.add_query_logger(lambda logged: sent.append(logged.query))
        statements = []
        for _ in range(2):  # the first round starts the listener and prepares the statements
            approval_id = await ask(agent)
            await asyncio.sleep(0)
            sent.clear()
            waiting = asyncio.create_task(agent.wait(approval_id, 10))
            # One turn of the loop runs the wait up to its first pause: asleep on its event,
            # or in a read that holds the pool's one connection. A statement of ours queues
            # behind such a read, so once it is answered any read of the wait was logged.
            await asyncio.sleep(0)
            async with own.connection() as probe:
                await probe.fetchval("SELECT 'probe'")
            await until(lambda: any("'probe'" in q for q in sent), what="the probe logged")
            before_decision = [q for q in sent if "'probe'" not in q]
            sent.clear()
            await store.decide(approval_id, Decision.approve(), "lead-1")
            assert (await waiting).status is ApprovalStatus.APPROVED
            await asyncio.sleep(0)
            statements.append((before_decision, list(sent)))
        await agent.close()
    before_decision, during_wait = statements[-1]
    assert before_decision == [] and len(during_wait) == 1, statements[-1]


async def _more(count: Awaitable[int], than: int) -> bool:
    return await count > than


async def listening_agent(own: Database, ring: KeyRing, store: ApprovalStore) -> ApprovalStore:
    """An agent's store on `own` that polls once a minute, its listener proven to listen: a
    wait of its was woken by a decision `store` made."""
    agent = ApprovalStore(own, ring, poll_interval=60)
    first = await ask(agent)
    async with own.connection() as conn:
        before = await listeners(conn, NOTIFY_CHANNEL)
        waiting = asyncio.create_task(agent.wait(first, 30))  # starts the listener
        await until(lambda: _more(listeners(conn, NOTIFY_CHANNEL), before), what="it listens")
    await store.decide(first, Decision.approve(), "lead-1")
    await asyncio.wait_for(waiting, 10)  # sooner than the poll: woken by the listener
    return agent


async def test_a_decision_between_a_request_and_its_wait_is_not_missed(
    database_url: str, store: ApprovalStore, ring: KeyRing
) -> None:
    """Decided before the agent waits: its listener heard it, so the wait reads at once (it
    does not sleep until the next poll)."""
    async with await Database.connect(database_url, pool_size=2) as own:
        agent = await listening_agent(own, ring, store)
        approval_id = await ask(agent)
        heard = asyncio.Event()
        conn = await asyncpg.connect(database_url)
        await conn.add_listener(NOTIFY_CHANNEL, lambda *_: heard.set())
        await store.decide(approval_id, Decision.reject(), "lead-1")
        await asyncio.wait_for(heard.wait(), 10)  # delivered to every listener by now, nearly
        await conn.close()
        await asyncio.sleep(0.2)  # ... and to the agent's: the wait starts after it heard
        decided = await asyncio.wait_for(agent.wait(approval_id, 30), 5)
        await agent.close()
    assert decided.status is ApprovalStatus.REJECTED


async def test_a_wait_that_ends_at_once_returns_the_approval_as_read_not_as_requested(
    database_url: str, store: ApprovalStore, ring: KeyRing
) -> None:
    """A vote of an open quorum notifies nobody: a wait of no time after the store's own
    request still reads before it returns."""
    async with await Database.connect(database_url, pool_size=2) as own:
        agent = await listening_agent(own, ring, store)
        approval_id = await ask(agent, ApprovalPolicy(quorum=2, any_reviewer=True))
        await store.decide(approval_id, Decision.approve(), "lead-1")
        now = await asyncio.wait_for(agent.wait(approval_id, 0), 5)
        await agent.close()
    assert now.status is ApprovalStatus.PENDING and now.approvers == ("lead-1",)


async def test_reviewers_deciding_at_once_each_count_once(store: ApprovalStore) -> None:
    """Racing decisions on one approval: each that loses the race reads again and is
    recorded after the winner's, so a quorum of five met at once is met exactly."""
    reviewers = [f"r{i}" for i in range(5)]
    approval_id = await ask(store, ApprovalPolicy(approvers=frozenset(reviewers), quorum=5))
    await asyncio.gather(*(store.decide(approval_id, Decision.approve(), r) for r in reviewers))
    approval = await store.get(approval_id)
    assert approval.status is ApprovalStatus.APPROVED
    assert sorted(approval.approvers) == reviewers and approval.version == 1 + len(reviewers)
    assert await store.problems(approval_id) == []


async def test_a_row_out_of_step_with_its_stream_is_refused_not_retried_for_ever(
    store: ApprovalStore, db: Database
) -> None:
    """A step whose write finds the stream elsewhere than the row says retries only while
    the row moves; a row the stream never catches up with is a VersionConflict at once."""
    approval_id = await ask(store)
    async with db.connection() as conn:  # the owner, behind the journal's back
        await conn.execute("UPDATE approvals SET version = 7 WHERE approval_id = $1", approval_id)
    try:
        with pytest.raises(VersionConflict):
            await asyncio.wait_for(store.decide(approval_id, Decision.approve(), "alice"), 30)
    finally:
        async with db.connection() as conn:
            await conn.execute(
                "UPDATE approvals SET version = 1 WHERE approval_id = $1", approval_id
            )
    assert (await store.get(approval_id)).status is ApprovalStatus.PENDING


async def test_every_combination_of_list_filters_selects_what_it_says(
    store: ApprovalStore,
) -> None:
    """`find` composes its query from the filters given: each combination (status, run, tool,
    a reviewer its approvers admit, a page cursor) selects exactly the rows the filters say."""
    runs = [f"run-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    leads = ApprovalPolicy(approvers=frozenset({"alice", "group:leads"}))
    made = []
    for run in runs:  # per run: an e-mail anyone may approve, a refund for alice and leads
        made.append(await ask(store, run_id=run, tool="email", call_id="call-email"))
        made.append(await ask(store, leads, run_id=run, call_id="call-refund"))
    await store.decide(made[0], Decision.approve(), "bob")
    mine = [a for a in await store.find(limit=10_000) if a.approval_id in made]
    assert len(mine) == len(made) == 4
    lead = Reviewer("carol", frozenset({"leads"}))
    for status in (None, ApprovalStatus.PENDING, ApprovalStatus.APPROVED):
        for run_id in (None, runs[1]):
            for tool in (None, "refund"):
                for admitting in (None, lead):
                    for after in (None, (mine[1].requested_at, mine[1].approval_id)):
                        found = await store.find(
                            status=status,
                            run_id=run_id,
                            tool=tool,
                            admitting=admitting,
                            after=after,
                            limit=10_000,
                        )
                        expected = [
                            a
                            for a in mine
                            if (status is None or a.status is status)
                            and (run_id is None or a.run_id == run_id)
                            and (tool is None or a.tool == tool)
                            and (
                                admitting is None
                                or admitting.matches(a.policy.approvers)
                                or not a.policy.approvers
                            )
                            and (after is None or (a.requested_at, a.approval_id) > after)
                        ]
                        assert [a for a in found if a.approval_id in made] == expected
    with pytest.raises(InvalidApprovalRequest, match="not an approval status"):
        await store.find(status="nope")  # type: ignore[arg-type]


async def test_the_approvals_table_equals_its_rebuild_from_the_journal(
    store: ApprovalStore,
) -> None:
    approval_id = await ask(store, ApprovalPolicy(quorum=2, any_reviewer=True))
    await store.decide(approval_id, Decision.approve(), "alice")
    await store.decide(approval_id, Decision.approve(), "bob")
    await store.consume(approval_id, "task-1")
    await store.cancel(await ask(store), "agent")
    assert await store.verify_projection() == []
    # The check can fail: change the table behind the journal's back.
    async with store.db.connection() as conn:
        await conn.execute(
            "UPDATE approvals SET decided_by = '{mallory}' WHERE approval_id = $1", approval_id
        )
    try:
        problems = await store.verify_projection()
        assert len(problems) == 1 and problems[0].startswith(approval_id)
    finally:
        async with store.db.connection() as conn:
            await conn.execute(
                "UPDATE approvals SET decided_by = '{alice,bob}' WHERE approval_id = $1",
                approval_id,
            )


async def test_a_reviewer_is_a_person_not_a_group(store: ApprovalStore) -> None:
    approval_id = await ask(store, ApprovalPolicy(approvers=frozenset({"group:finance"})))
    with pytest.raises(InvalidApprovalRequest, match="not a group"):
        await store.decide(approval_id, Decision.approve(), "group:finance")
    assert (await store.get(approval_id)).status is ApprovalStatus.PENDING


@pytest.mark.parametrize(
    "policy", [{"quorum": 0}, {"quorum": -3}, {"allowed": frozenset()}], ids=repr
)
def test_a_policy_that_can_never_be_met_is_a_typed_error(policy: dict[str, Any]) -> None:
    with pytest.raises(InvalidApprovalRequest):
        ApprovalPolicy(**policy)
