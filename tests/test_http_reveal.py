"""`POST /v1/approvals/{id}/reveal` over real HTTP: the arguments without the fields the policy
marks sensitive unless asked for, what led to the call, the reviews' reasons; each reveal
journaled first with whether sensitive fields were shown. And a decision whose edit breaks the
tool's argument schema: a 422 that records nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from approvals import ApprovalPolicy, ApprovalStore, Decision, RequestContext
from ledger.audit.reveals import reveal_problem
from ledger.journal import Journal, NewEvent
from ledger.keys import KeyRing
from ledger.store import Database
from ledger.store.logins import temporary_login

from .support.http import token_for, unique
from .support.inbox import Served, served
from .support.receivers import http_receiver

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string"},
        "amount": {"type": "number"},
        "iban": {"type": "string"},
    },
    "required": ["order_id", "amount"],
}
ARGS = {"order_id": "A7", "amount": 120, "iban": "DE89370400440532013000"}
CONTEXT = RequestContext("The parcel never came.", "Where is my money for A7?")


@pytest.fixture(scope="module")
async def api(database_url: str, ring: KeyRing) -> AsyncIterator[Served]:
    async with served(database_url) as serving:
        yield serving


async def asked(
    store: ApprovalStore, reviewer: str, *, context: RequestContext | None = CONTEXT
) -> str:
    approval = await store.request(
        run_id=unique("reveal"),
        tool="refund",
        args=ARGS,
        call_id="c1",
        requested_by="support-agent",
        policy=ApprovalPolicy(
            approvers=frozenset({reviewer}),
            headline=("amount",),
            sensitive=frozenset({"iban", "card"}),
            args_schema=SCHEMA,
        ),
        context=context,
    )
    return approval.approval_id


async def test_a_reveal_leaves_out_sensitive_fields_unless_asked_and_records_which(
    api: Served, db: Database, store: ApprovalStore, journal: Journal, ring: KeyRing
) -> None:
    ann = unique("ann")
    approval_id = await asked(store, ann)
    path, token = f"/v1/approvals/{approval_id}/reveal", await token_for(db, ann)

    plain = await api.client.post(path, headers=token)
    assert plain.status_code == 200, plain.text
    shown = plain.json()
    assert shown["args"] == {"order_id": "A7", "amount": 120}
    assert shown["hidden_fields"] == ["iban"]  # only fields the arguments hold
    assert shown["context"] == {
        "reason": "The parcel never came.",
        "last_user_message": "Where is my money for A7?",
    }
    assert shown["hitl"]["action_requests"][0]["args"] == shown["args"]
    assert shown["agent_inbox"]["action_request"]["args"] == shown["args"]
    assert shown["reviews"] == []

    full = await api.client.post(path, headers=token, params={"sensitive": "true"})
    assert full.status_code == 200, full.text
    assert full.json()["args"] == ARGS and full.json()["hidden_fields"] == []
    assert full.json()["hitl"]["action_requests"][0]["args"] == ARGS

    events = await journal.read_stream(f"reveal:{approval_id}")
    assert [(e.actor, e.data["sensitive"]) for e in events] == [(ann, False), (ann, True)]
    for event in events:  # what was shown is signed with the rest (`ledger verify` checks it)
        assert await reveal_problem(ring, event.stream_id, event.actor, event.data) is None
        forged = {**event.data, "sensitive": not event.data["sensitive"]}
        assert await reveal_problem(ring, event.stream_id, event.actor, forged) is not None


async def test_a_retried_reveal_is_replayed_only_when_it_is_the_same_reveal(
    api: Served, db: Database, store: ApprovalStore, journal: Journal
) -> None:
    ann = unique("ann")
    approval_id = await asked(store, ann)
    path = f"/v1/approvals/{approval_id}/reveal"
    key = {**await token_for(db, ann), "Idempotency-Key": unique("key")}
    first = await api.client.post(path, headers=key)
    again = await api.client.post(path, headers=key)
    assert again.headers["idempotent-replayed"] == "true" and again.json() == first.json()
    # The same key asking for more is another reveal: recorded, never hidden behind a replay.
    more = await api.client.post(path, headers=key, params={"sensitive": "true"})
    assert more.status_code == 200 and "idempotent-replayed" not in more.headers
    events = await journal.read_stream(f"reveal:{approval_id}")
    assert [e.data["sensitive"] for e in events] == [False, True]


async def test_a_reveal_planted_under_a_guessed_request_id_hides_no_real_reading(
    api: Served, db: Database, store: ApprovalStore, journal: Journal, database_url: str
) -> None:
    # A reviewer login without the signing key appends a reveal in ann's name under the key
    # the inbox will use (it is guessable): ann's real reading must still be recorded.
    ann = unique("ann")
    approval_id = await asked(store, ann)
    stream, key = f"reveal:{approval_id}", f"inbox-view:{approval_id}"
    planted = {
        "approval_id": approval_id,
        "sensitive": False,
        "at": "2026-01-01T00:00:00+00:00",
        "signature": {"key_id": "dsig-0000000000000000", "signature": "AAAA"},
        "request_id": key,
    }
    async with (
        temporary_login(database_url, "signoff_reviewer") as reviewer_url,
        await Database.connect(reviewer_url, pool_size=1) as thief,
    ):
        planting = [NewEvent("ledger.revealed", planted, ann)]
        await Journal(thief).append(stream, planting, expected_version=0)
    shown = await api.client.post(
        f"/v1/approvals/{approval_id}/reveal",
        headers={**await token_for(db, ann), "Idempotency-Key": key},
    )
    assert shown.status_code == 200 and "idempotent-replayed" not in shown.headers
    events = await journal.read_stream(stream)
    assert len(events) == 2
    assert await reveal_problem(api.service.ring, stream, ann, events[1].data) is None


async def test_a_reveal_without_captured_context_says_so_with_nulls(
    api: Served, db: Database, store: ApprovalStore
) -> None:
    ann = unique("ann")
    approval_id = await asked(store, ann, context=None)
    shown = await api.client.post(
        f"/v1/approvals/{approval_id}/reveal", headers=await token_for(db, ann)
    )
    assert shown.json()["context"] == {"reason": None, "last_user_message": None}


async def test_history_reads_who_rejected_and_why_and_what_an_edit_ran(
    api: Served, db: Database, store: ApprovalStore
) -> None:
    ann = unique("ann")
    token = await token_for(db, ann)
    rejected = await asked(store, ann)
    answer = await api.client.post(
        f"/v1/approvals/{rejected}/decision",
        json={"decision": "reject", "reason": "wrong order"},
        headers={**token, "Idempotency-Key": unique("k")},
    )
    assert answer.status_code == 200, answer.text
    assert "reason" not in answer.json()["reviews"][0]  # sealed: only a reveal opens it
    shown = (await api.client.post(f"/v1/approvals/{rejected}/reveal", headers=token)).json()
    [review] = shown["reviews"]
    assert (review["reviewer"], review["decision"], review["reason"]) == (
        ann,
        "reject",
        "wrong order",
    )

    edited = await asked(store, ann)
    await store.decide(edited, Decision.edit({**ARGS, "amount": 60}), ann)
    shown = (await api.client.post(f"/v1/approvals/{edited}/reveal", headers=token)).json()
    [review] = shown["reviews"]
    assert review["reason"] is None
    assert review["args"] == {"order_id": "A7", "amount": 60}
    assert shown["hidden_fields"] == ["iban"]


async def test_an_edit_that_breaks_the_schema_is_a_422_and_records_nothing(
    api: Served, db: Database, store: ApprovalStore, journal: Journal
) -> None:
    ann = unique("ann")
    approval_id = await asked(store, ann)
    token = await token_for(db, ann)
    before = await journal.read_stream(f"approval:{approval_id}")
    for body in (
        {"decision": "edit", "args": {"order_id": "A7", "amount": "lots"}},
        {"type": "edit", "edited_action": {"name": "refund", "args": {"amount": 1}}},
    ):
        refused = await api.client.post(
            f"/v1/approvals/{approval_id}/decision",
            json=body,
            headers={**token, "Idempotency-Key": unique("k")},
        )
        assert refused.status_code == 422, refused.text
        assert refused.json()["error"] == "invalid"
        assert "do not fit refund" in refused.json()["message"]
    assert await journal.read_stream(f"approval:{approval_id}") == before
    fitting = await api.client.post(
        f"/v1/approvals/{approval_id}/decision",
        json={"decision": "edit", "args": {"order_id": "A7", "amount": 60}},
        headers={**token, "Idempotency-Key": unique("k")},
    )
    assert fitting.status_code == 200 and fitting.json()["status"] == "edited"


@pytest.mark.parametrize("where", ["http", "file"])
async def test_an_edit_is_checked_without_fetching_what_the_schema_refers_to(
    api: Served, db: Database, store: ApprovalStore, journal: Journal, where: str
) -> None:
    # A worker writes the schema: a `$ref` to a URL would have the service fetch it (SSRF,
    # a read of its files, a hang without timeout). It resolves within the schema or not.
    ann = unique("ann")
    with http_receiver("/schema") as fetched:
        fetched.otherwise = (200, b'{"type": "string"}')
        url = fetched.url if where == "http" else "file:///etc/hostname"
        schema = {**SCHEMA, "properties": {**SCHEMA["properties"], "order_id": {"$ref": url}}}
        approval = await store.request(
            run_id=unique("reveal"),
            tool="refund",
            args=ARGS,
            call_id="c1",
            requested_by="support-agent",
            policy=ApprovalPolicy(approvers=frozenset({ann}), args_schema=schema),
        )
        before = await journal.read_stream(f"approval:{approval.approval_id}")
        refused = await api.client.post(
            f"/v1/approvals/{approval.approval_id}/decision",
            json={"decision": "edit", "args": {"order_id": "A7", "amount": 60}},
            headers={**await token_for(db, ann), "Idempotency-Key": unique("k")},
        )
        assert refused.status_code == 422, refused.text
        assert f"refers to '{url}'" in refused.json()["message"]
        assert fetched.received == []
    assert await journal.read_stream(f"approval:{approval.approval_id}") == before


async def test_an_edit_is_checked_without_running_the_schemas_regular_expressions(
    api: Served, db: Database, store: ApprovalStore
) -> None:
    # A worker writes the schema: `^(a+)+$` backtracks for ever on a long run of "a" and a
    # "!", holding the service's event loop. Its patterns are left to the tool.
    ann = unique("ann")
    schema = {**SCHEMA, "properties": {**SCHEMA["properties"], "order_id": {"pattern": "^(a+)+$"}}}
    approval = await store.request(
        run_id=unique("reveal"),
        tool="refund",
        args=ARGS,
        call_id="c1",
        requested_by="support-agent",
        policy=ApprovalPolicy(approvers=frozenset({ann}), args_schema=schema),
    )
    edited = await api.client.post(
        f"/v1/approvals/{approval.approval_id}/decision",
        json={"decision": "edit", "args": {"order_id": "aaaa!", "amount": 60}},
        headers={**await token_for(db, ann), "Idempotency-Key": unique("k")},
    )
    assert edited.status_code == 200, edited.text
    assert edited.json()["status"] == "edited"


async def test_a_reveal_that_hides_a_field_hides_its_value_in_what_led_to_the_call(
    api: Served, db: Database, store: ApprovalStore, journal: Journal
) -> None:
    # A model echoes the arguments it asks with: the IBAN the card hides is in its reason.
    ann = unique("ann")
    echoed = RequestContext(
        "Refunding 120 EUR to DE89370400440532013000 for A7.",
        "My IBAN is DE89370400440532013000, where is my money?",
    )
    approval_id = await asked(store, ann, context=echoed)
    path, token = f"/v1/approvals/{approval_id}/reveal", await token_for(db, ann)
    plain = (await api.client.post(path, headers=token)).json()
    assert plain["context"] == {
        "reason": "Refunding 120 EUR to [iban hidden] for A7.",
        "last_user_message": "My IBAN is [iban hidden], where is my money?",
    }
    full = (await api.client.post(path, headers=token, params={"sensitive": "true"})).json()
    assert full["context"] == echoed.to_json()
    events = await journal.read_stream(f"reveal:{approval_id}")
    assert [e.data["sensitive"] for e in events] == [False, True]
