"""What led to a call (the agent's reason, the user's last message), sealed into the request
like its arguments and opened by a reveal; edits checked against the tool's argument schema
before anything is recorded, whoever decides."""

from __future__ import annotations

import json
from typing import Any

import pytest

from approvals import (
    ApprovalPolicy,
    ApprovalStatus,
    ApprovalStore,
    Decision,
    InvalidApprovalRequest,
    RequestContext,
)
from approvals.context import CONTEXT_KEEP
from approvals.model import MAX_TEXT_BYTES
from ledger.journal import Journal

from .support.http import unique
from .support.processes import kek_env, run_cli

REFUND_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
    "required": ["order_id", "amount"],
}
ASKED = RequestContext(
    reason="The customer says the parcel never came; refunding in full.",
    last_user_message="My order A7 never arrived, I want my 120 EUR back.",
)


async def refund(
    store: ApprovalStore,
    *,
    context: RequestContext | None = None,
    run_id: str | None = None,
    policy: ApprovalPolicy | None = None,
) -> Any:
    return await store.request(
        run_id=run_id or unique("ctx"),
        tool="refund",
        args={"order_id": "A7", "amount": 120},
        call_id="c1",
        requested_by="support-agent",
        policy=policy or ApprovalPolicy(approvers=frozenset({"ann"})),
        context=context,
    )


async def test_the_context_is_sealed_in_the_request_and_opened_by_a_reveal(
    store: ApprovalStore, journal: Journal
) -> None:
    approval = await refund(store, context=ASKED)
    (requested,) = await journal.read_stream(f"approval:{approval.approval_id}")
    text = json.dumps(requested.data)
    assert "context_sealed" in requested.data
    assert "parcel" not in text and "never arrived" not in text  # never in clear
    assert (await store.get(approval.approval_id)).context is None  # not revealed
    revealed = await store.get(approval.approval_id, reveal=True)
    assert revealed.context == ASKED
    assert revealed.args == {"order_id": "A7", "amount": 120}


async def test_a_request_without_context_is_stored_as_before_and_reveals_an_empty_one(
    store: ApprovalStore, journal: Journal
) -> None:
    for context in (None, RequestContext()):
        approval = await refund(store, context=context)
        (requested,) = await journal.read_stream(f"approval:{approval.approval_id}")
        assert "context_sealed" not in requested.data
        revealed = await store.get(approval.approval_id, reveal=True)
        assert revealed.context == RequestContext(None, None)


async def test_the_same_request_returns_the_first_approval_whatever_its_context(
    store: ApprovalStore,
) -> None:
    run_id = unique("same")
    first = await refund(store, context=ASKED, run_id=run_id)
    again = await refund(store, context=RequestContext("another reason", None), run_id=run_id)
    bare = await refund(store, run_id=run_id)
    assert first.approval_id == again.approval_id == bare.approval_id
    assert (await store.get(first.approval_id, reveal=True)).context == ASKED


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        ("x" * (MAX_TEXT_BYTES + 1), None),
        (None, "é" * (MAX_TEXT_BYTES // 2 + 1)),  # in bytes, not characters
        ("a\x00b", None),
        (None, "\ud800"),
        (7, None),
    ],
    ids=["long reason", "long message in bytes", "NUL", "lone surrogate", "not text"],
)
async def test_a_context_that_cannot_be_stored_is_refused_before_anything_is_written(
    store: ApprovalStore, reason: Any, message: Any
) -> None:
    run_id = unique("refused")
    with pytest.raises(InvalidApprovalRequest):
        await refund(store, context=RequestContext(reason, message), run_id=run_id)
    with pytest.raises(InvalidApprovalRequest, match="RequestContext"):
        await refund(store, context={"reason": "r"}, run_id=run_id)  # type: ignore[arg-type]
    assert await store.find(run_id=run_id) == []


async def test_what_an_adapter_captures_never_fails_a_request(store: ApprovalStore) -> None:
    chat = "hello " * 50_000 + "\x00 and finally: refund A7\ud800"
    captured = RequestContext.captured("  ", chat)
    assert captured is not None and captured.reason is None
    message = captured.last_user_message
    assert message is not None and len(message) == CONTEXT_KEEP + 1
    assert message.startswith("…") and message.endswith("and finally: refund A7\ufffd")
    long_reason = RequestContext.captured("because " * 1000, None)
    assert long_reason is not None and long_reason.reason is not None
    assert long_reason.reason.startswith("because because") and long_reason.reason.endswith("…")
    assert RequestContext.captured(None, "") is None
    approval = await refund(store, context=captured)
    assert (await store.get(approval.approval_id, reveal=True)).context == captured


async def test_an_edit_that_breaks_the_tools_schema_is_refused_and_records_nothing(
    store: ApprovalStore, journal: Journal
) -> None:
    policy = ApprovalPolicy(approvers=frozenset({"ann"}), args_schema=REFUND_SCHEMA)
    approval = await refund(store, policy=policy)
    stream = f"approval:{approval.approval_id}"
    with pytest.raises(InvalidApprovalRequest, match="amount: 'lots' is not of type 'number'"):
        await store.decide(
            approval.approval_id, Decision.edit({"order_id": "A7", "amount": "lots"}), "ann"
        )
    assert len(await journal.read_stream(stream)) == 1
    edited = await store.decide(
        approval.approval_id, Decision.edit({"order_id": "A7", "amount": 60}), "ann"
    )
    assert edited.status is ApprovalStatus.EDITED


async def test_a_self_confirmed_edit_is_checked_against_the_schema_too(
    store: ApprovalStore, journal: Journal
) -> None:
    approval = await refund(store, policy=ApprovalPolicy(args_schema=REFUND_SCHEMA))
    with pytest.raises(InvalidApprovalRequest, match="'order_id' is a required property"):
        await store.self_confirm(approval.approval_id, Decision.edit({"amount": 60}))
    assert len(await journal.read_stream(f"approval:{approval.approval_id}")) == 1


async def test_the_cli_shows_the_context_on_reveal_and_refuses_a_bad_edit_in_one_line(
    store: ApprovalStore, journal: Journal, database_url: str
) -> None:
    policy = ApprovalPolicy(approvers=frozenset({"ann"}), args_schema=REFUND_SCHEMA)
    approval = await refund(store, context=ASKED, policy=policy)
    approval_id = approval.approval_id
    shown = await run_cli(
        "approvals", "show", approval_id, "--reveal", "--by", "ann", "--json",
        database_url=database_url, env=kek_env(),
    )  # fmt: skip
    assert shown.code == 0, shown.stderr
    assert json.loads(shown.stdout)["context"] == ASKED.to_json()
    (reveal,) = await journal.read_stream(f"reveal:{approval_id}")
    assert reveal.data["sensitive"] is False

    refused = await run_cli(
        "approvals", "decide", approval_id, "--edit", '{"order_id": "A7", "amount": "lots"}',
        "--by", "ann", database_url=database_url, env=kek_env(),
    )  # fmt: skip
    assert refused.code == 2
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "amount: 'lots' is not of type 'number'" in refused.stderr
    assert len(await journal.read_stream(f"approval:{approval_id}")) == 1
