"""Hostile input at every public entry point: each value is refused with a `SignoffError`
subclass, and nothing is written (rows and events are counted before and after).

The values are the ones a fuzzer found reaching the driver or the encoder: NUL characters and
lone surrogates in ids, names and text, JSON nested too deep (beyond the interpreter's
recursion limit, and just beyond Signoff's limit), non-string keys, integers outside their
column's range, and Welt payloads whose second answer is bad.
"""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, cast

import pytest
from langchain_core.runnables import RunnableConfig

from adapters.langgraph.tools import SignoffTools, ToolSpec
from adapters.welt import InvalidWeltPayload, WeltAgent
from approvals import (
    ApprovalPolicy,
    ApprovalStore,
    Decision,
    DecisionKind,
    InvalidApprovalRequest,
    TokenMalformed,
)
from ledger import InvalidEvent, SignoffError
from ledger.calls.model import CallContext, CallStatus, ToolCall
from ledger.calls.service import ToolLedger
from ledger.errors import InvalidToolCall, ResultNotSerializable
from ledger.journal import Journal, NewEvent
from ledger.limits import MAX_JSON_DEPTH
from ledger.store import Database

NUL = "x\x00y"
SURROGATE = "x\ud800y"


def nested(levels: int) -> list[Any]:
    """A list `levels` arrays deep, built without recursion."""
    value: list[Any] = []
    for _ in range(levels - 1):
        value = [value]
    return value


TOO_DEEP = nested(100_000)  # beyond the interpreter's recursion limit
JUST_TOO_DEEP = nested(MAX_JSON_DEPTH + 1)  # beyond Signoff's documented limit
BAD_JSON: dict[str, Any] = {
    "NUL in a value": {"note": NUL},
    "NUL in a key": {NUL: 1},
    "nested 100000 deep": {"a": TOO_DEEP},
    "nested 65 deep": {"a": JUST_TOO_DEEP},
    "int key": {1: "a"},
}
"""Values the old encoder stored (changed) or crashed on; surrogates are in `BAD_TEXT`."""
BAD_TEXT = {"NUL": NUL, "lone surrogate": SURROGATE}


@dataclass
class Env:
    db: Database
    journal: Journal
    store: ApprovalStore
    ledger: ToolLedger
    tools: SignoffTools
    welt: WeltAgent
    approval_id: str = ""  # approvals of this case's own (see `Case.needs`)
    second_id: str = ""
    token: str = ""


@dataclass(frozen=True)
class Case:
    name: str
    act: Callable[[Env], Awaitable[Any]]
    error: type[SignoffError]
    needs: str | None = None  # "pending": an approval to decide; "approved": one to consume


RUN_ARGS = {"order": "A-1", "amount": 10}


def fresh_run() -> str:
    """A run of its own for each case, so that no case finds what another one wrote."""
    return f"run-{uuid.uuid4().hex[:12]}"


def request(**overrides: Any) -> Callable[[Env], Awaitable[Any]]:
    def call() -> dict[str, Any]:
        fields = {"tool": "refund", "args": RUN_ARGS, "call_id": "c", "requested_by": "agent"}
        return {"run_id": fresh_run(), **fields, **overrides}

    return lambda env: env.store.request(**call())


async def never_runs(args: dict[str, Any], context: CallContext) -> Any:
    raise AssertionError("a refused call must not run")


def execute(**overrides: Any) -> Callable[[Env], Awaitable[Any]]:
    def call() -> ToolCall:
        fields = {"call_id": "c", "tool": "lookup", "args": RUN_ARGS}
        return ToolCall(**{"run_id": fresh_run(), **fields, **overrides})

    return lambda env: env.ledger.execute(call(), never_runs)


def append(data: dict[str, Any], expected_version: int = 0) -> Callable[[Env], Awaitable[Any]]:
    events = [NewEvent("hostile.test", data, actor="fuzzer")]
    return lambda env: env.journal.append(
        f"hostile:{fresh_run()}", events, expected_version=expected_version
    )


def decide(decision: Decision, reviewer: str = "bob") -> Callable[[Env], Awaitable[Any]]:
    return lambda env: env.store.decide(env.approval_id, decision, reviewer)


def answer(responses: dict[str, Any], user_id: str = "slack:T0001:U0002") -> Any:
    """Welt answers: `responses` maps "first" and "second" (the case's two pending approvals)
    or an interrupt id of its own to an answer."""

    async def act(env: Env) -> Any:
        ids = {"first": env.approval_id, "second": env.second_id}
        payload = {ids.get(key, key): value for key, value in responses.items()}
        return await env.welt.answer(payload, user_id=user_id)

    return act


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def langgraph_config(**configurable: Any) -> RunnableConfig:
    return {"configurable": {"thread_id": "thread-hostile", **configurable}}


Act = Callable[[Env], Awaitable[Any]]


def with_value(act: Callable[[Env, str], Awaitable[Any]], value: str) -> Act:
    return lambda env: act(env, value)


REFUND_CALL = {"name": "refund", "id": "call-lg", "args": RUN_ARGS}
APPROVE = {"type": "approve"}


def pending_approval(**configurable: Any) -> Callable[[Env], Awaitable[Any]]:
    return lambda env: env.tools.pending_approval(
        REFUND_CALL, langgraph_config(**{"signoff_run_id": fresh_run(), **configurable})
    )


CASES = [
    # -- Journal.append ----------------------------------------------------------------------
    *(Case(f"journal data: {n}", append(v), InvalidEvent) for n, v in BAD_JSON.items()),
    Case("journal: expected_version 2**40", append({}, 2**40), InvalidEvent),
    Case(
        "journal: an event that is no NewEvent",
        lambda env: env.journal.append("hostile:s", ["x"], expected_version=0),  # type: ignore[list-item]
        InvalidEvent,
    ),
    # -- ApprovalStore.request ---------------------------------------------------------------
    *(
        Case(f"request: {field} with a {n}", request(**{field: v}), InvalidApprovalRequest)
        for field in ("run_id", "tool", "call_id", "requested_by", "thread_id", "kind")
        for n, v in BAD_TEXT.items()
    ),
    Case("request: args with a lone surrogate", request(args={"a": SURROGATE}), SignoffError),
    *(
        Case(f"request: args {n}", request(args=v), InvalidApprovalRequest)
        for n, v in BAD_JSON.items()
    ),
    *(
        Case(f"request: thread config {n}", request(thread_config=v), InvalidApprovalRequest)
        for n, v in BAD_JSON.items()
    ),
    Case(
        "request: thread config with a float jsonb would change",
        request(thread_config={"configurable": {"thread_id": "t", "n": 1e23}}),
        InvalidApprovalRequest,
    ),
    Case(
        "request: an expiry out of range",
        request(policy=ApprovalPolicy(expires_in=timedelta.max)),
        InvalidApprovalRequest,
    ),
    # -- ApprovalStore.decide ----------------------------------------------------------------
    *(
        Case(
            f"decide: reviewer with a {n}",
            decide(Decision.approve(), v),
            InvalidApprovalRequest,
            "pending",
        )
        for n, v in BAD_TEXT.items()
    ),
    *(
        Case(
            f"decide: approval id with a {n}",
            with_value(lambda env, v: env.store.decide(v, Decision.approve(), "bob"), v),
            InvalidApprovalRequest,
        )
        for n, v in BAD_TEXT.items()
    ),
    *(
        Case(
            f"decide: reason with a {n}",
            decide(Decision.reject(v)),
            InvalidApprovalRequest,
            "pending",
        )
        for n, v in BAD_TEXT.items()
    ),
    *(
        Case(
            f"decide: answer with a {n}",
            decide(Decision.respond(v)),
            InvalidApprovalRequest,
            "pending",
        )
        for n, v in BAD_TEXT.items()
    ),
    *(
        Case(
            f"decide: edited args {n}", decide(Decision.edit(v)), InvalidApprovalRequest, "pending"
        )
        for n, v in BAD_JSON.items()
    ),
    # -- ApprovalStore.consume / verify_token ------------------------------------------------
    *(
        Case(
            f"consume: task run id with a {n}",
            with_value(lambda env, v: env.store.consume(env.approval_id, v), v),
            InvalidApprovalRequest,
            needs="approved",
        )
        for n, v in BAD_TEXT.items()
    ),
    Case(
        "verify_token: a token body nested 100000 deep",
        lambda env: env.store.verify_token(
            f"so1.{b64(b'[' * 100_000)}.{b64(bytes(32))}",
            run_id="r",
            tool="t",
            args={},
            call_id="c",
        ),
        TokenMalformed,
    ),
    Case(
        "verify_token: args nested 100000 deep",
        lambda env: env.store.verify_token(
            env.token,
            run_id="run-hostile",
            tool="refund",
            args=BAD_JSON["nested 100000 deep"],
            call_id="call-hostile",
        ),
        InvalidApprovalRequest,
        needs="approved",
    ),
    # -- ToolLedger.execute ------------------------------------------------------------------
    # (A NUL in the run or call id, and a surrogate in the tool or turn id, were refused
    # before already, by the journal's checks of stream ids and data.)
    *(
        Case(f"execute: {field} with a {n}", execute(**{field: BAD_TEXT[n]}), InvalidToolCall)
        for field, n in (
            ("run_id", "lone surrogate"),
            ("call_id", "lone surrogate"),
            ("tool", "NUL"),
            ("turn_id", "NUL"),
        )
    ),
    *(Case(f"execute: args {n}", execute(args=v), InvalidToolCall) for n, v in BAD_JSON.items()),
    *(
        Case(
            f"ledger get: run id with a {n}",
            with_value(lambda env, v: env.ledger.get(v, "call-1"), v),
            InvalidToolCall,
        )
        for n, v in BAD_TEXT.items()
    ),
    # -- SignoffTools: ids from the LangGraph config -----------------------------------------
    *(
        Case(f"langgraph: {key} with a {n}", pending_approval(**{key: v}), SignoffError)
        for key in ("thread_id", "signoff_run_id")
        for n, v in BAD_TEXT.items()
    ),
    *(
        Case(
            f"langgraph: requested_by with a {n}",
            pending_approval(signoff_requested_by=v),
            InvalidApprovalRequest,
        )
        for n, v in BAD_TEXT.items()
    ),
    # -- WeltAgent.answer: the whole payload is checked before any answer is recorded --------
    Case(
        "welt: the second answer's text is too long",
        answer(
            {
                "first": {"value": True, "source": "option"},
                "second": {"value": "x" * 300_000, "source": "input"},
            }
        ),
        InvalidWeltPayload,
        needs="pending",
    ),
    Case(
        "welt: the second answer's text has a lone surrogate",
        answer(
            {
                "first": {"value": True, "source": "option"},
                "second": {"value": SURROGATE, "source": "input"},
            }
        ),
        InvalidWeltPayload,
        needs="pending",
    ),
    Case(
        "welt: the second interrupt id has a NUL",
        answer(
            {"first": {"value": True, "source": "option"}, NUL: {"value": 1, "source": "option"}}
        ),
        InvalidWeltPayload,
        needs="pending",
    ),
    Case(
        "welt: a user id that is no Slack user",
        answer({"first": {"value": True, "source": "option"}}, user_id="alice"),
        InvalidWeltPayload,
        needs="pending",
    ),
]


@pytest.fixture(scope="module")
async def env(
    db: Database, journal: Journal, store: ApprovalStore, ledger: ToolLedger
) -> AsyncIterator[Env]:
    async with SignoffTools(
        ledger, store, [ToolSpec("refund", approval=ApprovalPolicy())]
    ) as tools:
        welt = WeltAgent(cast(Any, None), store)  # answering needs no graph
        yield Env(db, journal, store, ledger, tools, welt)


COUNTS = """
SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM approvals),
       (SELECT count(*) FROM tool_calls), (SELECT count(*) FROM approval_grants)
"""


async def written(db: Database) -> tuple[int, ...]:
    async with db.connection() as conn:
        row = await conn.fetchrow(COUNTS)
    return tuple(row)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_hostile_input_is_refused_with_a_typed_error_and_writes_nothing(
    env: Env, case: Case
) -> None:
    if case.needs is not None:
        ask: dict[str, Any] = {
            "run_id": "r",
            "tool": "refund",
            "args": RUN_ARGS,
            "requested_by": "a",
        }
        env.approval_id, env.second_id = [
            (await env.store.request(**ask, call_id=uuid.uuid4().hex)).approval_id for _ in range(2)
        ]
        if case.needs == "approved":
            await env.store.decide(env.approval_id, Decision.approve(), "bob")
            env.token = await env.store.issue_token(env.approval_id)
    before = await written(env.db)
    with pytest.raises(case.error) as caught:
        await case.act(env)
    assert isinstance(caught.value, SignoffError)
    assert await written(env.db) == before, "something was written"
    if case.needs == "pending":
        for approval_id in (env.approval_id, env.second_id):
            assert (await env.store.get(approval_id)).status.value == "pending"


async def test_the_journal_refuses_a_batch_size_that_would_never_advance(journal: Journal) -> None:
    with pytest.raises(InvalidEvent, match="batch_size"):
        async with asyncio.timeout(5):
            async for _ in journal.read_all(batch_size=0):
                pass


@pytest.mark.parametrize(
    ("name", "read"),
    [
        ("stream id with a NUL", lambda j: j.read_stream(NUL)),
        ("stream id with a lone surrogate", lambda j: j.stream_version(SURROGATE)),
        ("after_version 2**40", lambda j: j.read_stream("s", after_version=2**40)),
        ("position 2**70", lambda j: anext(j.read_all(after=2**70))),
    ],
)
async def test_journal_reads_refuse_values_no_column_can_hold(
    journal: Journal, name: str, read: Callable[[Journal], Awaitable[Any]]
) -> None:
    with pytest.raises(InvalidEvent):
        await read(journal)


async def test_a_tool_result_nested_too_deep_records_no_outcome(ledger: ToolLedger) -> None:
    async def deep_result(args: dict[str, Any], context: CallContext) -> Any:
        return {"rows": TOO_DEEP}

    call = ToolCall("run-deep-result", "call-1", "lookup", {})
    with pytest.raises(ResultNotSerializable):
        await ledger.execute(call, deep_result)
    record = await ledger.get("run-deep-result", "call-1")
    assert record.status is CallStatus.RUNNING and record.result_digest is None


async def test_edited_args_read_back_exactly_as_given(store: ApprovalStore) -> None:
    """The JSON rules are what make this hold: every stored value reads back equal."""
    edited = {"amount": 10**40, "ratio": 0.1, "tags": ["é"], "deep": nested(MAX_JSON_DEPTH - 1)}
    approval = await store.request(
        run_id="run-exact", tool="refund", args=RUN_ARGS, call_id="c-1", requested_by="agent"
    )
    await store.decide(approval.approval_id, Decision.edit(edited), "bob")
    consumed = await store.consume(approval.approval_id, "task-1")
    assert consumed.decision is not None and consumed.decision.kind is DecisionKind.EDIT
    assert consumed.decision.args == edited
