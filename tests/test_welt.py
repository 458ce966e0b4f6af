"""The Welt adapter: questions for approvals, answers from Slack as store decisions, resumes in
any process, and Welt's conversation turns decoded with tool blocks refused.

Payloads under `tests/fixtures/welt/` are recorded as Welt sends them (its wire contract):
conversation turns (`messages`, Converse-shaped, files base64) and answers
(`interrupt_responses`, `{"value", "source"}` each). The interrupt ids in a recorded answer are
the ones its questions carried; `addressed` points them at this run's approvals.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ToolCall
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.outputs import ChatGenerationChunk
from langchain_core.tools import BaseTool, tool

from adapters.welt import (
    APPROVE_VALUE,
    DECIDED_ELSEWHERE,
    REJECT_VALUE,
    AnswerStatus,
    ForgedToolTurn,
    InvalidWeltPayload,
    MissingReviewer,
    UnknownInterrupt,
    UnsupportedInterrupt,
    WeltAgent,
    WeltAnswer,
    approval_event,
    approval_reason,
    check_reason,
    decision_for,
    decode_messages,
    envelope_of,
    file_name,
    notices,
    parse_interrupt_responses,
    pending_events,
    record_answers,
    signoff_requests,
    slack_reviewer,
)
from approvals import (
    Approval,
    ApprovalPolicy,
    ApprovalStatus,
    ApprovalStore,
    Decision,
    DecisionKind,
    Review,
    ReviewerDirectory,
)
from ledger.calls.model import CallStatus
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.db import open_raw_connection
from tests.support.directory import list_reviewers
from tests.support.processes import TEST_KEK, finish, kek_env, start_program
from tests.support.scratch import scratch_database
from tests.support.welt_workers import (
    SCRIPT,
    ScriptedModel,
    WeltHarness,
    addressed,
    opened,
    refund_call,
    tool_runs,
)

FIXTURES = Path(__file__).parent / "fixtures" / "welt"
SLACK_USER = "slack:T0001:U0123ABCD"  # Welt's runtime user id: slack:<team>:<user>
# The Slack users these tests answer as, listed in the directory: a policy naming no approvers
# admits only listed reviewers.
WELT_REVIEWERS = (
    "slack:U0123ABCD", "slack:U0B055", "slack:U0FFFF", "slack:U1", "slack:U2", "finance:dana",
)  # fmt: skip
REVIEWER = "slack:U0123ABCD"
BOSS = "slack:T0001:U0B055"
ALL = frozenset(DecisionKind)


def fixture(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return loaded


def approval_with(
    policy: ApprovalPolicy | None = None, *, reviews: tuple[Review, ...] = ()
) -> Approval:
    """An approval as the store would hand it out (no database needed)."""
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    return Approval(
        approval_id="apr-" + "1" * 32,
        run_id="run-1",
        thread_id="thread-1",
        tool="refund",
        kind="tool_call",
        call_id="call-1",
        args_digest="0" * 64,
        binding="0" * 64,
        requested_by="agent",
        policy=policy or ApprovalPolicy(),
        status=ApprovalStatus.PENDING,
        requested_at=now,
        expires_at=now + timedelta(hours=24),
        reviews=reviews,
        thread_config={"configurable": {"thread_id": "thread-1"}},
    )


ARGS = {"order_id": "A7", "amount": 120}
APPROVE = {"value": True, "label": "Approve", "style": "primary"}
REJECT = {"value": False, "label": "Reject", "style": "danger"}
ELSEWHERE = {"value": DECIDED_ELSEWHERE, "label": "Decided elsewhere"}
ANSWER_FIELD = {"label": "Answer instead of running refund"}


# -- outbound: questions ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("allowed", "quorum", "options", "field"),
    [
        (ALL, 1, [APPROVE, REJECT, ELSEWHERE], ANSWER_FIELD),
        ({DecisionKind.APPROVE, DecisionKind.REJECT}, 1, [APPROVE, REJECT], None),
        ({DecisionKind.APPROVE}, 1, [APPROVE], None),
        ({DecisionKind.RESPOND}, 1, None, ANSWER_FIELD),
        ({DecisionKind.REJECT, DecisionKind.RESPOND}, 1, [REJECT], ANSWER_FIELD),
        ({DecisionKind.EDIT}, 1, [ELSEWHERE], None),
        ({DecisionKind.APPROVE, DecisionKind.EDIT}, 1, [APPROVE, ELSEWHERE], None),
        (ALL, 2, [APPROVE, REJECT], None),  # a quorum allows only approve and reject
    ],
)
def test_each_decision_the_policy_allows_gets_its_widget(
    allowed: frozenset[DecisionKind],
    quorum: int,
    options: list[dict[str, Any]] | None,
    field: dict[str, Any] | None,
) -> None:
    approval = approval_with(
        ApprovalPolicy(allowed=frozenset(allowed), quorum=quorum, any_reviewer=quorum > 1)
    )
    event = approval_event(approval, ARGS)

    body = event["interrupt"]
    assert (body["id"], body["name"]) == (approval.approval_id, "refund")
    reason = cast(dict[str, Any], body["reason"])
    check_reason(reason)
    assert reason.get("options") == options
    assert reason.get("input") == field
    assert set(reason) <= {"message", "options", "input"}
    assert (APPROVE_VALUE, REJECT_VALUE) == (True, False)


def test_the_question_shows_the_call_as_a_person_reads_it() -> None:
    approval = approval_with(ApprovalPolicy(description="Refunds over 100 EUR need finance"))
    message = approval_reason(approval, ARGS)["message"]

    assert message.startswith("**Approve `refund`?**\nRefunds over 100 EUR need finance\n")
    assert '```json\n{\n  "order_id": "A7",\n  "amount": 120\n}\n```' in message
    assert f"Approval `{approval.approval_id}`" in message
    assert "denied if nobody decides by 2026-12-01 12:00 UTC" in message
    # A description given with the request (the tool's rule) wins over the policy's.
    assert "Refund money" in approval_reason(approval, ARGS, description="Refund money")["message"]


def test_fields_the_policy_marks_sensitive_stay_out_of_the_thread() -> None:
    approval = approval_with(ApprovalPolicy(sensitive=frozenset({"iban", "card"})))
    message = approval_reason(approval, {**ARGS, "iban": "DE89370400440532013000"})["message"]

    assert "DE8937" not in message and '"amount": 120' in message
    assert "Not shown, marked sensitive: `iban`" in message
    assert f"signoff approvals show {approval.approval_id} --reveal" in message


def test_an_edit_only_policy_is_asked_with_where_to_decide_it() -> None:
    approval = approval_with(ApprovalPolicy(allowed=frozenset({DecisionKind.EDIT})))
    reason = approval_reason(approval, ARGS)

    assert reason.get("options") == [ELSEWHERE] and "input" not in reason
    assert "can only be decided with edited arguments" in reason["message"]
    assert f"signoff approvals decide {approval.approval_id} --edit" in reason["message"]


def test_a_quorum_question_says_who_approved_so_far() -> None:
    at = datetime(2026, 11, 30, 12, 5, tzinfo=UTC)
    reviews = (Review("slack:U1", DecisionKind.APPROVE, at),)
    approval = approval_with(ApprovalPolicy(quorum=2, any_reviewer=True), reviews=reviews)

    assert "Needs 2 approvals" in approval_reason(approval, ARGS)["message"]
    assert "approved so far by slack:U1" in approval_reason(approval, ARGS)["message"]


def test_arguments_cannot_hide_characters_or_break_out_of_their_block() -> None:
    args = {"file": "report\u202egnp.exe", "note": "```\n**Approved by finance**\n```"}
    message = approval_reason(approval_with(), args)["message"]

    assert "\u202e" not in message and "report\\u202egnp.exe" in message
    fences = [line for line in message.splitlines() if line.lstrip().startswith("```")]
    assert fences == ["```json", "```"]


def test_long_arguments_are_cut_to_what_welt_shows_with_a_note() -> None:
    approval = approval_with()
    reason = approval_reason(approval, {"text": "x" * 10_000})

    check_reason(reason)
    assert len(reason["message"]) <= 3000
    assert "Arguments cut after" in reason["message"]
    assert f"signoff approvals show {approval.approval_id} --reveal" in reason["message"]


def test_reasons_that_welt_would_not_render_as_specified_are_caught() -> None:
    good = approval_reason(approval_with(), ARGS)
    for bad in (
        {**good, "approve": {}},
        {"message": "Sure?"},
        {"message": "", "input": {}},
        {"message": "Sure?", "options": []},
        {"message": "Sure?", "options": [{"value": True, "labl": "Yes"}]},
        {"message": "Sure?", "options": [{"value": True, "style": "warning"}]},
        {"message": "Sure?", "input": {"placeholder": "type"}},
        {"message": "x" * 3001, "input": {}},
    ):
        with pytest.raises(ValueError):
            check_reason(bad)


def test_pauses_that_are_no_signoff_approvals_are_refused() -> None:
    for value in ("Deploy to prod?", {"question": "sure?"}, {"type": "tool_approvals"}):
        with pytest.raises(UnsupportedInterrupt):
            signoff_requests("i-1", value)
    batch = {"type": "tool_approvals", "requests": [{"approval_id": "a"}, {"approval_id": "b"}]}
    assert [r["approval_id"] for r in signoff_requests("i-2", batch)] == ["a", "b"]


# -- inbound: answers ------------------------------------------------------------------------


def test_recorded_answers_parse_into_answers_with_their_widget() -> None:
    [pressed] = parse_interrupt_responses(fixture("answer_approve"))
    [typed] = parse_interrupt_responses(fixture("answer_respond")["interrupt_responses"])
    both = parse_interrupt_responses(fixture("answer_two_questions"))

    assert pressed == WeltAnswer("apr-5f0c7a8e2d4b4f1a9c3e6b8d0a2f4c61", True, "option")
    assert typed.source == "input" and typed.value.startswith("Do not refund")
    assert [(a.value, a.source) for a in both] == [(True, "option"), (False, "option")]
    assert envelope_of(fixture("answer_approve")) == "interrupt_responses"
    assert envelope_of(fixture("turn_refund")) == "messages"


def test_an_answer_means_what_its_widget_says() -> None:
    def meaning(value: Any, source: Any = "option") -> Decision | None:
        return decision_for(WeltAnswer("apr-1", value, source))

    assert meaning(True) == Decision.approve()
    for not_true in (False, "true", 1, "approve", None, {"value": True}):
        decision = meaning(not_true)
        assert decision is not None and decision.kind is DecisionKind.REJECT
    assert meaning(DECIDED_ELSEWHERE) is None
    assert meaning("approve", "input") == Decision.respond("approve")


@pytest.mark.parametrize(
    ("payload", "where"),
    [
        ([], "payload"),
        ({}, "payload"),
        ({"messages": [], "interrupt_responses": {}}, "payload"),
        ({"interrupt_responses": {}, "user": "U1"}, "payload"),
        ({"interrupt_responses": {}}, "interrupt_responses"),
        ({"interrupt_responses": ["apr-1"]}, "interrupt_responses"),
        ({"interrupt_responses": {"apr-1": True}}, "interrupt_responses['apr-1']"),
        ({"interrupt_responses": {"apr-1": {"value": True}}}, "interrupt_responses['apr-1']"),
        (
            {"interrupt_responses": {"apr-1": {"value": True, "source": "option", "by": "U1"}}},
            "interrupt_responses['apr-1']",
        ),
        (
            {"interrupt_responses": {"apr-1": {"value": True, "source": "button"}}},
            "interrupt_responses['apr-1'].source",
        ),
        (
            {"interrupt_responses": {"apr-1": {"value": 42, "source": "input"}}},
            "interrupt_responses['apr-1'].value",
        ),
        (
            {"interrupt_responses": {"apr-1": {"value": "  ", "source": "input"}}},
            "interrupt_responses['apr-1'].value",
        ),
        ({"interrupt_responses": {" ": {"value": True, "source": "option"}}}, "[' ']"),
    ],
)
def test_payloads_that_break_the_contract_are_refused_whole(payload: Any, where: str) -> None:
    with pytest.raises(InvalidWeltPayload) as caught:
        envelope_of(payload)
        parse_interrupt_responses(payload)
    assert where in caught.value.where


def test_the_reviewer_is_the_slack_user_welt_verified() -> None:
    reviewer = slack_reviewer(SLACK_USER)
    assert reviewer.id == REVIEWER
    assert reviewer.groups == frozenset()  # the reviewer directory's, never Welt's
    assert slack_reviewer("U0123ABCD").id == slack_reviewer("slack:U0123ABCD").id == REVIEWER
    for bad in ("alice", "slack:T1:U2:x", "slack::U0123", "u0123abcd", "slack:T0001:"):
        with pytest.raises(ValueError):
            slack_reviewer(bad)
    for missing in (None, "", " "):
        with pytest.raises(MissingReviewer):
            slack_reviewer(missing)


# -- inbound: conversation turns -------------------------------------------------------------


def test_a_turn_decodes_to_standard_content_blocks() -> None:
    decoded = decode_messages(fixture("turn_with_files"))

    assert [m["role"] for m in decoded] == ["user", "assistant", "user"]
    assert decoded[0]["content"] == [
        {
            "type": "file",
            "base64": "JVBERi0xLjQK",
            "mime_type": "application/pdf",
            "name": "invoice A7",
            "filename": "invoice A7.pdf",
        },
        {"type": "text", "text": "<@U0123ABCD>: here is the invoice and a photo"},
        {"type": "image", "base64": "iVBORw0KGgo=", "mime_type": "image/png"},
    ]
    assert decoded[2]["content"][1] == {
        "type": "video",
        "base64": "AAAAIGZ0eXBpc29t",
        "mime_type": "video/mp4",
    }
    assert decode_messages(fixture("turn_refund")["messages"]) == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "<@U0123ABCD>: order A7 arrived broken, please refund it"}
            ],
        }
    ]


@pytest.mark.parametrize(
    ("name", "where", "block"),
    [
        ("turn_forged_tool_use", "messages[1].content[0]", "toolUse"),
        ("turn_forged_tool_result", "messages[0].content[1]", "toolResult"),
    ],
)
def test_tool_blocks_in_a_turn_are_refused_as_forged(name: str, where: str, block: str) -> None:
    with pytest.raises(ForgedToolTurn) as caught:
        decode_messages(fixture(name))
    assert (caught.value.where, caught.value.block) == (where, block)
    assert "forged" in str(caught.value)


TEXT = {"text": "hi"}


@pytest.mark.parametrize(
    ("messages", "where"),
    [
        ([], "messages"),
        ([{"role": "assistant", "content": [TEXT]}], "messages[0]"),
        ([{"role": "system", "content": [TEXT]}], "messages[0].role"),
        ([{"role": "user", "content": []}], "messages[0].content"),
        ([{"role": "user", "content": [TEXT], "id": 1}], "messages[0]"),
        ([{"role": "user", "content": [{"text": ""}]}], "messages[0].content[0].text"),
        ([{"role": "user", "content": [{"text": "a", "image": {}}]}], "messages[0].content[0]"),
        ([{"role": "user", "content": [{"reasoningContent": {}}]}], "messages[0].content[0]"),
        (
            [
                {"role": "user", "content": [TEXT]},
                {"role": "assistant", "content": [{"image": {"format": "png", "source": {}}}]},
            ],
            "messages[1].content[0]",
        ),
        (
            [{"role": "user", "content": [{"image": {"format": "bmp", "source": {"bytes": "x"}}}]}],
            "messages[0].content[0].image.format",
        ),
        (
            [{"role": "user", "content": [{"video": {"format": "mp4", "source": {"bytes": ""}}}]}],
            "messages[0].content[0].video.source.bytes",
        ),
        (
            [
                {
                    "role": "user",
                    "content": [{"document": {"format": "pdf", "source": {"bytes": "x"}}}],
                }
            ],
            "messages[0].content[0].document",
        ),
    ],
)
def test_turns_outside_the_contract_are_refused(messages: Any, where: str) -> None:
    with pytest.raises(InvalidWeltPayload) as caught:
        decode_messages(messages)
    assert caught.value.where == where


# -- answers in the store ----------------------------------------------------------------------


@pytest.fixture
async def store(db: Database, database_url: str) -> AsyncIterator[ApprovalStore]:
    await list_reviewers(database_url, *WELT_REVIEWERS)
    approvals = ApprovalStore(db, await KeyRing.open(db, LocalKek(TEST_KEK)))
    yield approvals
    await approvals.close()


async def requested(store: ApprovalStore, policy: ApprovalPolicy | None = None) -> Approval:
    thread = f"thread-{uuid.uuid4().hex[:8]}"
    return await store.request(
        run_id=thread,
        tool="refund",
        args=ARGS,
        call_id="call-1",
        requested_by="agent",
        policy=policy,
        thread_id=thread,
        thread_config={"configurable": {"thread_id": thread}},
    )


async def deliver(
    store: ApprovalStore, payload: dict[str, Any], *ids: str, user: str = SLACK_USER
) -> list[Any]:
    return await record_answers(
        store, parse_interrupt_responses(addressed(payload, *ids)), slack_reviewer(user)
    )


async def test_a_pressed_button_is_the_slack_users_decision(store: ApprovalStore) -> None:
    approval = await requested(store)
    [outcome] = await deliver(store, fixture("answer_approve"), approval.approval_id)

    assert (outcome.status, outcome.decision) == (AnswerStatus.DECIDED, DecisionKind.APPROVE)
    stored = await store.get(approval.approval_id)
    assert (stored.status, stored.decided_by) == (ApprovalStatus.APPROVED, (REVIEWER,))
    assert [r.reviewer for r in stored.reviews] == [REVIEWER]
    events = await store.journal.read_stream(f"approval:{approval.approval_id}")
    assert [(e.type, e.actor) for e in events][-1] == ("approval.decided", REVIEWER)

    rejected = await requested(store)
    [outcome] = await deliver(store, fixture("answer_reject"), rejected.approval_id)
    stored = await store.get(rejected.approval_id, reveal=True)
    assert stored.status is ApprovalStatus.REJECTED
    assert stored.decision == Decision.reject("rejected in Slack")


async def test_typed_text_is_an_answer_instead_of_the_tool_even_if_it_says_approve(
    store: ApprovalStore,
) -> None:
    approval = await requested(store)
    [outcome] = await deliver(store, fixture("answer_typed_approve"), approval.approval_id)

    assert outcome.decision is DecisionKind.RESPOND
    stored = await store.get(approval.approval_id, reveal=True)
    assert stored.status is ApprovalStatus.RESPONDED
    assert stored.decision == Decision.respond("approve")


async def test_a_duplicate_delivery_is_a_harmless_repeat(store: ApprovalStore) -> None:
    approval = await requested(store)
    await deliver(store, fixture("answer_approve"), approval.approval_id)
    [again] = await deliver(store, fixture("answer_approve"), approval.approval_id)

    assert again.status is AnswerStatus.REPEATED
    assert len((await store.get(approval.approval_id)).reviews) == 1
    assert notices([again]) == []


async def test_another_typed_answer_by_the_same_person_is_no_repeat(store: ApprovalStore) -> None:
    approval = await requested(store)
    [first] = await deliver(store, fixture("answer_respond"), approval.approval_id)
    [same] = await deliver(store, fixture("answer_respond"), approval.approval_id)
    [other] = await deliver(store, fixture("answer_typed_approve"), approval.approval_id)

    assert [first.status, same.status, other.status] == [
        AnswerStatus.DECIDED,
        AnswerStatus.REPEATED,
        AnswerStatus.ALREADY_DECIDED,
    ]
    stored = await store.get(approval.approval_id, reveal=True)
    assert stored.decision == Decision.respond("Do not refund; offer a replacement instead")
    assert len(stored.reviews) == 1


async def test_another_answer_to_a_decided_approval_is_reported_not_recorded(
    store: ApprovalStore,
) -> None:
    approval = await requested(store)
    await deliver(store, fixture("answer_approve"), approval.approval_id)
    [late] = await deliver(store, fixture("answer_reject"), approval.approval_id, user=BOSS)

    assert late.status is AnswerStatus.ALREADY_DECIDED
    stored = await store.get(approval.approval_id)
    assert (stored.status, stored.decided_by, len(stored.reviews)) == (
        ApprovalStatus.APPROVED,
        (REVIEWER,),
        1,
    )
    [notice] = notices([late])
    assert "decided already (approved by slack:U0123ABCD)" in notice["data"]


async def test_answers_to_unknown_ids_record_nothing(store: ApprovalStore) -> None:
    approval = await requested(store)
    unknown = "apr-" + "0" * 32
    with pytest.raises(UnknownInterrupt) as caught:
        await deliver(store, fixture("answer_two_questions"), approval.approval_id, unknown)

    assert caught.value.interrupt_ids == (unknown,)
    assert (await store.get(approval.approval_id)).status is ApprovalStatus.PENDING


async def test_a_slack_user_the_policy_does_not_name_is_refused(store: ApprovalStore) -> None:
    approval = await requested(store, ApprovalPolicy(approvers=frozenset({"slack:U0B055"})))
    [outcome] = await deliver(store, fixture("answer_approve"), approval.approval_id)

    assert outcome.status is AnswerStatus.REFUSED
    assert (await store.get(approval.approval_id)).status is ApprovalStatus.PENDING
    [notice] = notices([outcome])
    assert "was not recorded" in notice["data"] and "not an approver" in notice["data"]

    # A group matches only what the reviewer directory says, not the Slack team Welt names.
    team = await requested(store, ApprovalPolicy(approvers=frozenset({"group:slack-team:T0001"})))
    [outcome] = await deliver(store, fixture("answer_approve"), team.approval_id)
    assert outcome.status is AnswerStatus.REFUSED
    await ReviewerDirectory(store.db).add(REVIEWER, ["slack-team:T0001"], by="admin")
    [outcome] = await deliver(store, fixture("answer_approve"), team.approval_id)
    assert outcome.status is AnswerStatus.DECIDED
    [outcome] = await deliver(
        store, fixture("answer_reject"), team.approval_id, user="slack:T0002:U0FFFF"
    )
    assert outcome.status is AnswerStatus.ALREADY_DECIDED


async def test_a_late_answer_to_an_expired_approval_is_denied(store: ApprovalStore) -> None:
    approval = await requested(store, ApprovalPolicy(expires_in=timedelta(milliseconds=50)))
    await asyncio.sleep(0.1)  # what is tested: the expiry passes by the server's clock
    [outcome] = await deliver(store, fixture("answer_approve"), approval.approval_id)

    assert outcome.status is AnswerStatus.EXPIRED
    assert (await store.get(approval.approval_id)).status is ApprovalStatus.EXPIRED
    assert "expired before anyone decided" in notices([outcome])[0]["data"]


async def test_decided_elsewhere_records_nothing(store: ApprovalStore) -> None:
    approval = await requested(store)
    [outcome] = await deliver(store, fixture("answer_decided_elsewhere"), approval.approval_id)

    assert (outcome.status, outcome.decision) == (AnswerStatus.NO_DECISION, None)
    assert (await store.get(approval.approval_id)).reviews == ()


async def test_a_quorum_needs_different_slack_users(store: ApprovalStore) -> None:
    approval = await requested(store, ApprovalPolicy(quorum=2, any_reviewer=True))
    answer = fixture("answer_approve")
    [first] = await deliver(store, answer, approval.approval_id)
    [same] = await deliver(store, answer, approval.approval_id)
    [second] = await deliver(store, answer, approval.approval_id, user=BOSS)

    assert [first.status, same.status, second.status] == [
        AnswerStatus.DECIDED,
        AnswerStatus.REPEATED,
        AnswerStatus.DECIDED,
    ]
    assert first.approval.status is ApprovalStatus.PENDING
    stored = await store.get(approval.approval_id)
    assert (stored.status, stored.decided_by) == (
        ApprovalStatus.APPROVED,
        ("slack:U0123ABCD", "slack:U0B055"),
    )


async def test_pending_approvals_can_be_asked_again(store: ApprovalStore) -> None:
    approval = await requested(store)
    [event] = await pending_events(store, run_id=approval.run_id)

    assert (event["interrupt"]["id"], event["interrupt"]["name"]) == (
        approval.approval_id,
        "refund",
    )
    assert '"order_id": "A7"' in event["interrupt"]["reason"]["message"]
    await deliver(store, fixture("answer_approve"), approval.approval_id)
    assert await pending_events(store, run_id=approval.run_id) == []


async def test_answers_without_a_slack_user_record_nothing(store: ApprovalStore) -> None:
    approval = await requested(store)
    welt = WeltAgent(cast(Any, None), store)
    payload = addressed(fixture("answer_approve"), approval.approval_id)
    with pytest.raises(MissingReviewer):
        await welt.answer(payload, user_id=None)
    assert (await store.get(approval.approval_id)).status is ApprovalStatus.PENDING


# -- round trips with an agent -------------------------------------------------------------------


@pytest.fixture(scope="module")
async def welt_url(server_url: str) -> AsyncIterator[str]:
    """A database of this module's own: the agents create LangGraph's checkpoint tables."""
    async with scratch_database(server_url, prefix="signoff_welt") as url:
        await list_reviewers(url, *WELT_REVIEWERS)
        yield url


@pytest.fixture(scope="module")
async def harness(welt_url: str) -> AsyncIterator[WeltHarness]:
    async with opened(welt_url, LocalKek(TEST_KEK)) as h:
        yield h


USING_REFUND = {"current_tool_use": {"name": "refund", "toolUseId": "call-refund-1"}}
REFUNDED: list[dict[str, Any]] = [
    {"tool_result": {"toolUseId": "call-refund-1", "status": "success"}},
    {"data": "Refunded 120 EUR on order A7."},
]
"""What the thread shows once the refund ran: its indicator closed, then the model's words."""


async def collect(events: AsyncIterator[Any]) -> list[dict[str, Any]]:
    return [cast(dict[str, Any], e) async for e in events]


async def ask(harness: WeltHarness, policy: ApprovalPolicy | None = None) -> dict[str, Any]:
    """Start a turn from the recorded refund request; return the one question it stops with."""
    welt, _ = harness.welt(policy=policy)
    events = await collect(welt.reply(fixture("turn_refund")))
    assert len(events) == 2 and events[0] == USING_REFUND and "interrupt" in events[1], events
    question: dict[str, Any] = events[1]["interrupt"]
    return question


def payload_file(tmp_path: Path, name: str, *ids: str) -> str:
    path = tmp_path / f"{name}-{uuid.uuid4().hex[:6]}.json"
    path.write_text(json.dumps(addressed(fixture(name), *ids)))
    return str(path)


async def worker(*args: str) -> dict[str, Any]:
    process = await start_program("tests.support.welt_workers", *args, env=kek_env())
    result: dict[str, Any] = json.loads(await finish(process))
    return result


async def test_an_answer_from_slack_resumes_the_agent_in_another_process(
    harness: WeltHarness, welt_url: str, tmp_path: Path
) -> None:
    question = await ask(harness)
    approval = await harness.store.get(question["id"])
    assert approval.status is ApprovalStatus.PENDING and question["name"] == "refund"
    assert '"amount": 120' in question["reason"]["message"]
    assert [o["value"] for o in question["reason"]["options"]] == [True, False, DECIDED_ELSEWHERE]
    thread = str(approval.thread_id)
    assert await tool_runs_of(harness, thread) == []

    answer = payload_file(tmp_path, "answer_approve", question["id"])
    delivered = await worker("deliver", welt_url, answer, SLACK_USER, "default")

    assert [o["status"] for o in delivered["outcomes"]] == ["decided"]
    assert delivered["events"] == REFUNDED
    approval = await harness.store.get(question["id"])
    assert (approval.status, approval.decided_by) == (ApprovalStatus.APPROVED, (REVIEWER,))
    assert approval.consumed
    runs = await tool_runs_of(harness, thread)
    assert [(r["args"], r["pid"]) for r in runs] == [(ARGS, delivered["pid"])]
    call = await harness.ledger.get(thread, "call-refund-1")
    assert (call.status, call.approval_id) == (CallStatus.SUCCEEDED, question["id"])

    # Welt delivers the same answer again, to a third process: nothing is decided or run.
    again = await worker("deliver", welt_url, answer, SLACK_USER, "default")
    assert again["pid"] != delivered["pid"]
    assert [o["status"] for o in again["outcomes"]] == ["repeated"]
    assert (again["events"], again["model_calls"]) == ([], 0)
    assert len(await tool_runs_of(harness, thread)) == 1
    assert len((await harness.store.get(question["id"])).reviews) == 1


async def test_two_deliveries_at_once_decide_once_and_resume_once(
    harness: WeltHarness, welt_url: str, tmp_path: Path
) -> None:
    question = await ask(harness)
    answer = payload_file(tmp_path, "answer_approve", question["id"])
    results = await asyncio.gather(
        *(worker("deliver", welt_url, answer, SLACK_USER, "default") for _ in range(2))
    )

    statuses = sorted(o["status"] for r in results for o in r["outcomes"])
    assert statuses == ["decided", "repeated"]
    assert sorted(r["events"] for r in results) == [[], REFUNDED]
    thread = str((await harness.store.get(question["id"])).thread_id)
    assert len(await tool_runs_of(harness, thread)) == 1


async def test_an_answer_recorded_in_one_process_resumes_in_another(
    harness: WeltHarness, welt_url: str, tmp_path: Path
) -> None:
    question = await ask(harness)
    answer = payload_file(tmp_path, "answer_respond", question["id"])
    recorded = await worker("answer", welt_url, answer, SLACK_USER, "default")
    assert [o["decision"] for o in recorded["outcomes"]] == ["respond"]

    resumed = await worker("resume", welt_url, "default", question["id"])
    assert resumed["pid"] != recorded["pid"]
    assert resumed["events"] == REFUNDED
    approval = await harness.store.get(question["id"])
    thread = str(approval.thread_id)
    assert approval.status is ApprovalStatus.RESPONDED and approval.consumed
    assert await tool_runs_of(harness, thread) == []  # the answer replaced the tool
    welt, _ = harness.welt()
    state = await welt.graph.aget_state({"configurable": {"thread_id": thread}})
    tool_message = state.values["messages"][2]
    assert tool_message.content == "Do not refund; offer a replacement instead"


async def test_a_refused_answer_asks_again_until_an_approver_decides(
    harness: WeltHarness,
) -> None:
    policy = ApprovalPolicy(approvers=frozenset({"slack:U0B055"}))
    question = await ask(harness, policy)
    welt, _ = harness.welt(policy=policy)

    payload = addressed(fixture("answer_approve"), question["id"])
    first = await collect(welt.reply(payload, user_id=SLACK_USER))
    assert "was not recorded" in first[0]["data"]
    assert [e["interrupt"]["id"] for e in first[1:]] == [question["id"]]  # asked again

    second = await collect(welt.reply(payload, user_id=BOSS))
    assert second == REFUNDED
    approval = await harness.store.get(question["id"])
    assert approval.decided_by == ("slack:U0B055",)
    assert len(await tool_runs_of(harness, str(approval.thread_id))) == 1


async def test_an_edit_only_approval_is_decided_elsewhere_then_continued_from_slack(
    harness: WeltHarness,
) -> None:
    policy = ApprovalPolicy(allowed=frozenset({DecisionKind.EDIT}))
    question = await ask(harness, policy)
    assert question["reason"]["options"] == [ELSEWHERE]
    welt, _ = harness.welt(policy=policy)
    payload = addressed(fixture("answer_decided_elsewhere"), question["id"])

    # Pressed before anyone decided: nothing recorded, the question comes back.
    early = await collect(welt.reply(payload, user_id=SLACK_USER))
    assert [e["interrupt"]["id"] for e in early] == [question["id"]]

    edited = {"order_id": "A7", "amount": 60}
    await harness.store.decide(question["id"], Decision.edit(edited), "finance:dana")
    done = await collect(welt.reply(payload, user_id=SLACK_USER))
    assert done == REFUNDED  # the script's words
    approval = await harness.store.get(question["id"])
    runs = await tool_runs_of(harness, str(approval.thread_id))
    assert [r["args"] for r in runs] == [edited]


async def test_one_stop_with_two_questions_is_answered_and_resumed_at_once(
    harness: WeltHarness,
) -> None:
    both = AIMessage(
        content="",
        tool_calls=[
            {"id": "call-a", "name": "refund", "args": ARGS, "type": "tool_call"},
            {"id": "call-b", "name": "refund", "args": {"order_id": "B2", "amount": 30}},
        ],
    )
    welt, _ = harness.welt(script=[both, AIMessage(content="One refunded, one not.")])
    events = await collect(welt.reply(fixture("turn_refund")))
    assert [e["current_tool_use"]["toolUseId"] for e in events[:2]] == ["call-a", "call-b"]
    ids = [e["interrupt"]["id"] for e in events[2:]]
    assert len(ids) == 2 and all(i.startswith("apr-") for i in ids)
    # The two questions come in either order (the calls run side by side): call-a's first.
    by_call = {(await harness.store.get(i)).call_id: i for i in ids}
    assert sorted(by_call) == ["call-a", "call-b"]
    ids = [by_call["call-a"], by_call["call-b"]]

    payload = addressed(fixture("answer_two_questions"), *ids)  # approve the first, reject
    done = await collect(welt.reply(payload, user_id=SLACK_USER))
    # The rejected call's indicator ends failed; the calls finish in either order.
    assert sorted(
        e["tool_result"]["toolUseId"] + ":" + e["tool_result"]["status"] for e in done[:2]
    ) == [
        "call-a:success",
        "call-b:error",
    ]
    assert done[2:] == [{"data": "One refunded, one not."}]
    statuses = [(await harness.store.get(i)).status for i in ids]
    assert statuses == [ApprovalStatus.APPROVED, ApprovalStatus.REJECTED]
    thread = str((await harness.store.get(ids[0])).thread_id)
    assert [r["args"] for r in await tool_runs_of(harness, thread)] == [ARGS]


async def test_a_thread_another_process_is_resuming_is_left_to_it(harness: WeltHarness) -> None:
    question = await ask(harness)
    welt, _ = harness.welt()
    payload = addressed(fixture("answer_approve"), question["id"])
    outcomes = await welt.answer(payload, user_id=SLACK_USER)
    thread = str(outcomes[0].approval.thread_id)

    holder = await open_raw_connection(harness.db.url)
    try:
        assert await holder.fetchval(
            "SELECT pg_try_advisory_lock(hashtextextended($1, 0))", f"signoff.resume:{thread}"
        )
        assert await collect(welt.resume(outcomes)) == []
        assert await tool_runs_of(harness, thread) == []
    finally:
        await holder.close()  # as when the other process ends: the lock goes with it
    # Welt delivers again (the first process died after recording): the thread still waits.
    again = await collect(welt.reply(payload, user_id=SLACK_USER))
    assert again == REFUNDED
    assert len(await tool_runs_of(harness, thread)) == 1


async def test_a_forged_turn_never_reaches_the_model(harness: WeltHarness) -> None:
    welt, model = harness.welt(script=[refund_call(amount=5000)])
    for name in ("turn_forged_tool_use", "turn_forged_tool_result"):
        with pytest.raises(ForgedToolTurn):
            await collect(welt.reply(fixture(name)))
    assert model.seen == []


async def tool_runs_of(harness: WeltHarness, thread: str) -> list[dict[str, Any]]:
    return [r for r in await tool_runs(harness.db) if r["thread_id"] == thread]


# -- the reply: text, tool-use indicators, files -------------------------------------------------

CSV = base64.b64encode(b"order,amount\nA7,120\n").decode("ascii")
PDF = "JVBERi0xLjQK"
PNG = "iVBORw0KGgo="


def file_tools() -> list[BaseTool]:
    @tool
    def create_sample_file(name: str) -> list[dict[str, Any]]:
        """Create a CSV file for the person."""
        return [
            {"type": "text", "text": f"Created {name}.csv."},
            {"type": "file", "name": name, "mime_type": "text/csv", "base64": CSV},
        ]

    @tool
    def read_invoice(order_id: str) -> list[dict[str, Any]]:
        """Hand the model an invoice to read."""
        invoice = {"type": "file", "name": f"invoice {order_id}", "mime_type": "application/pdf"}
        return [{**invoice, "base64": PDF}]

    @tool
    def export_nothing() -> list[dict[str, Any]]:
        """Create a file with no bytes."""
        return [{"type": "file", "name": "empty", "mime_type": "text/plain", "base64": ""}]

    return [create_sample_file, read_invoice, export_nothing]


def call(call_id: str, tool_name: str, **args: Any) -> ToolCall:
    return {"id": call_id, "name": tool_name, "args": args, "type": "tool_call"}


FILE_SCRIPT = [
    AIMessage(
        content="",
        tool_calls=[
            call("call-csv", "create_sample_file", name="sample-7f3a"),
            call("call-pdf", "read_invoice", order_id="A7"),
            call("call-empty", "export_nothing"),
        ],
    ),
    AIMessage(
        content=[
            {"type": "text", "text": "Here is the sample, and a chart."},
            {"type": "image", "base64": PNG, "mime_type": "image/png"},
        ]
    ),
]


@pytest.mark.parametrize("through_signoff", [True, False], ids=["signoff-tools", "plain-tools"])
async def test_files_of_the_named_tools_and_of_the_model_are_uploaded(
    harness: WeltHarness, through_signoff: bool
) -> None:
    welt, model = harness.welt(
        FILE_SCRIPT,
        tools=file_tools(),
        files_from={"create_sample_file"},
        through_signoff=through_signoff,
    )
    events = await collect(welt.reply(fixture("turn_refund")))

    assert events[:3] == [
        {"current_tool_use": {"name": "create_sample_file", "toolUseId": "call-csv"}},
        {"current_tool_use": {"name": "read_invoice", "toolUseId": "call-pdf"}},
        {"current_tool_use": {"name": "export_nothing", "toolUseId": "call-empty"}},
    ]
    tools_part, reply = events[3:-2], events[-2:]
    results = [e["tool_result"] for e in tools_part if "tool_result" in e]
    assert sorted(r["toolUseId"] for r in results) == ["call-csv", "call-empty", "call-pdf"]
    assert {r["status"] for r in results} == {"success"}
    # Only the named tool's file, right after its result; the invoice stays with the model,
    # and a file with no bytes is not sent.
    files = [e for e in tools_part if "file" in e]
    assert files == [{"file": {"name": "sample-7f3a.csv", "bytes": CSV}}]
    csv_result = tools_part.index({"tool_result": {"toolUseId": "call-csv", "status": "success"}})
    assert tools_part[csv_result + 1] == files[0]
    assert reply == [
        {"data": "Here is the sample, and a chart."},
        {"file": {"name": "image.png", "bytes": PNG}},
    ]
    assert len(model.seen) == 2  # the model read every tool's result


def test_files_from_takes_tool_names_not_one_string(harness: WeltHarness) -> None:
    with pytest.raises(TypeError, match="tool names"):
        harness.welt(files_from="create_sample_file")


def test_an_upload_is_named_after_the_block_and_its_media_type() -> None:
    def named(kind: str, **block: Any) -> str:
        return file_name(kind, block)

    assert named("file", name="report-1", mime_type="text/csv") == "report-1.csv"
    assert named("image", mime_type="image/jpeg") == "image.jpeg"
    assert named("video", name="clip", mime_type="video/3gpp") == "clip.3gp"
    assert named("file", name="sheet", mime_type="application/vnd.ms-excel") == "sheet.xls"
    assert named("audio", mime_type="audio/ogg") == "audio.ogg"  # a type Welt's formats lack
    assert named("file", name="", mime_type="application/x-tar+gzip") == "file.bin"
    assert named("file", name="data") == "data.bin"


class StreamingModel(ScriptedModel):
    """The scripted model, streamed: text word by word, each tool call as a first chunk with
    its name and id, then argument fragments without either (as providers stream them)."""

    disable_streaming: Any = False

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        self.seen.append(list(messages))
        reply = self.reply(messages)
        chunks = [AIMessageChunk(content=word) for word in re.split(r"(?<= )", reply.text) if word]
        for index, tool_call in enumerate(reply.tool_calls):
            args = json.dumps(tool_call["args"])
            opening = tool_call_chunk(
                name=tool_call["name"], id=tool_call["id"], args="", index=index
            )
            chunks.append(AIMessageChunk(content="", tool_call_chunks=[opening]))
            for part in (args[: len(args) // 2], args[len(args) // 2 :]):
                fragment = tool_call_chunk(name=None, id=None, args=part, index=index)
                chunks.append(AIMessageChunk(content="", tool_call_chunks=[fragment]))
        for chunk in chunks:
            generation = ChatGenerationChunk(message=chunk)
            if run_manager is not None:
                run_manager.on_llm_new_token(chunk.text, chunk=generation)
            yield generation


async def test_a_streamed_tool_call_opens_one_indicator_and_its_result_closes_it(
    harness: WeltHarness,
) -> None:
    welt, _ = harness.welt(model=StreamingModel(script=list(SCRIPT)))
    events = await collect(welt.reply(fixture("turn_refund")))
    assert [next(iter(e)) for e in events] == ["current_tool_use", "interrupt"]
    assert events[0] == USING_REFUND

    payload = addressed(fixture("answer_approve"), events[1]["interrupt"]["id"])
    done = await collect(welt.reply(payload, user_id=SLACK_USER))
    assert done[0] == REFUNDED[0]
    words = [e["data"] for e in done[1:]]
    assert len(words) > 1 and "".join(words) == REFUNDED[1]["data"]


async def test_a_rejected_call_closes_its_indicator_as_failed(harness: WeltHarness) -> None:
    question = await ask(harness)
    welt, _ = harness.welt()
    payload = addressed(fixture("answer_reject"), question["id"])
    done = await collect(welt.reply(payload, user_id=SLACK_USER))
    assert done[0] == {"tool_result": {"toolUseId": "call-refund-1", "status": "error"}}
    assert [next(iter(e)) for e in done[1:]] == ["data"]


async def test_files_in_a_turn_reach_the_model_as_standard_content_blocks(
    harness: WeltHarness,
) -> None:
    # The turn holds one reply of Welt's already: the model answers with the script's second.
    script = [AIMessage(content="unused"), AIMessage(content="A damaged parcel; I can refund it.")]
    welt, model = harness.welt(script)
    events = await collect(welt.reply(fixture("turn_with_files")))

    assert events == [{"data": "A damaged parcel; I can refund it."}]
    [conversation] = model.seen
    assert [type(m).__name__ for m in conversation] == ["HumanMessage", "AIMessage", "HumanMessage"]
    first, last = conversation[0], conversation[2]
    assert first.content_blocks == [
        {
            "type": "file",
            "base64": "JVBERi0xLjQK",
            "mime_type": "application/pdf",
            "name": "invoice A7",
            "filename": "invoice A7.pdf",
        },
        {"type": "text", "text": "<@U0123ABCD>: here is the invoice and a photo"},
        {"type": "image", "base64": "iVBORw0KGgo=", "mime_type": "image/png"},
    ]
    assert last.content_blocks[1] == {
        "type": "video",
        "base64": "AAAAIGZ0eXBpc29t",
        "mime_type": "video/mp4",
    }
