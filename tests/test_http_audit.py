"""The tool-call ledger and the journal's digests over real HTTP: the service on a login that has
only `signoff_reviewer`, the calls made by an agent worker on a login that has only
`signoff_app` (without the reviewer KEK), callers with API tokens made by the owner."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from adapters.http.server import running
from adapters.http.service import open_service
from approvals import ApprovalPolicy, ApprovalStore, Decision, ReviewerDirectory
from approvals.gate import approval_gate
from ledger.audit.digest import signing_keys
from ledger.audit.verifier import (
    ConsistencyProof,
    Digest,
    ExportedEvent,
    InclusionProof,
    Invalid,
    check_consistency,
    check_digest,
    check_inclusion,
)
from ledger.calls.model import CallContext, CallStatus, ToolCall, call_stream
from ledger.calls.service import ToolLedger
from ledger.journal import Journal
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.logins import temporary_login
from ledger.store.settings import Settings

from .support.http import token_for, unique
from .support.processes import TEST_KEK, TEST_REVIEWER_KEK
from .test_digest import settle


@dataclass
class Api:
    client: httpx.AsyncClient
    reviewer: dict[str, str]
    auditor: dict[str, str]
    auditor_id: str
    reviewer_id: str


@pytest.fixture(scope="module")
async def api(database_url: str, db: Database, ring: KeyRing) -> AsyncIterator[Api]:
    async with temporary_login(database_url, "signoff_reviewer") as url:
        settings = Settings(
            database_url=url, kek=LocalKek(TEST_KEK), reviewer_kek=LocalKek(TEST_REVIEWER_KEK)
        )
        service = await open_service(settings, pool_size=4)
        reviewer, auditor = unique("rita"), unique("audit")
        try:
            async with (
                running(service) as (_, port),
                httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as client,
            ):
                yield Api(
                    client,
                    await token_for(db, reviewer),
                    await token_for(db, auditor, scope="auditor"),
                    auditor,
                    reviewer,
                )
        finally:
            await service.close()


@pytest.fixture(scope="module")
async def worker(database_url: str) -> AsyncIterator[ToolLedger]:
    """An agent worker's ledger: a login with only `signoff_app`, no reviewer KEK."""
    async with temporary_login(database_url, "signoff_app") as url:
        settings = Settings(database_url=url, kek=LocalKek(TEST_KEK), reviewer_kek=None)
        db = await Database.connect(url, pool_size=2, settings=settings)
        ring = await KeyRing.open(db, create_missing=False)
        assert not ring.can_sign_decisions
        ledger = ToolLedger(db, ring, lease_seconds=1.0, poll_interval=0.05)
        yield ledger
        await ledger.close()
        await db.close()


class Refunds:
    """A refund tool that counts its runs; `fails` makes it raise (its outcome unknown)."""

    def __init__(self, *, fails: bool = False) -> None:
        self.fails, self.runs = fails, 0

    async def __call__(self, args: dict[str, Any], context: CallContext) -> str:
        self.runs += 1
        if self.fails:
            raise ConnectionError("the payment provider hung up mid-request")
        return f"refunded {args['amount']}"


def refund(run_id: str, call_id: str = "refund/1") -> ToolCall:
    return ToolCall(run_id, call_id, "refund", {"amount": 120, "card": "4242"}, turn_id="t1")


async def unknown_call(worker: ToolLedger) -> ToolCall:
    """A single-attempt write whose tool raised: the ledger cannot know whether it took effect."""
    call = refund(unique("run/http"))
    outcome = await worker.execute(call, Refunds(fails=True))
    assert outcome.status is CallStatus.OUTCOME_UNKNOWN
    return call


async def succeeded_call(worker: ToolLedger, run_id: str | None = None, n: int = 1) -> ToolCall:
    call = refund(run_id or unique("run/http"), f"refund/{n}")
    outcome = await worker.execute(call, Refunds())
    assert outcome.status is CallStatus.SUCCEEDED
    return call


def ids(call: ToolCall) -> dict[str, str]:
    return {"run_id": call.run_id, "call_id": call.call_id}


def resolution(call: ToolCall, status: str = "succeeded", **fields: Any) -> dict[str, Any]:
    return {**ids(call), "status": status, "request_id": uuid.uuid4().hex, **fields}


async def test_the_endpoints_are_in_the_openapi_document(api: Api) -> None:
    paths = (await api.client.get("/v1/openapi.json")).json()["paths"]
    assert {"/v1/calls", "/v1/calls/story", "/v1/ledger/digest", "/v1/ledger/export"} <= set(paths)
    for path in ("/v1/calls/reveal", "/v1/calls/resolve", "/v1/ledger/proofs/inclusion"):
        assert "post" in paths[path]


async def test_every_endpoint_needs_a_token(api: Api) -> None:
    body = {"run_id": "r", "call_id": "c"}
    for method, path in (
        ("GET", "/v1/calls"),
        ("GET", "/v1/calls/story?run_id=r&call_id=c"),
        ("POST", "/v1/calls/reveal"),
        ("POST", "/v1/calls/resolve"),
        ("GET", "/v1/ledger/digest"),
        ("POST", "/v1/ledger/proofs/inclusion"),
        ("POST", "/v1/ledger/proofs/consistency"),
        ("GET", "/v1/ledger/export"),
    ):
        response = await api.client.request(method, path, json=body)
        assert response.status_code == 401, (path, response.text)
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert response.json()["error"] == "unauthenticated"


async def test_a_reviewer_reads_only_the_outcome_unknown_queue(
    api: Api, worker: ToolLedger, journal: Journal
) -> None:
    call = await unknown_call(worker)
    queue = await api.client.get(
        "/v1/calls",
        params={"status": "outcome_unknown", "run_id": call.run_id},
        headers=api.reviewer,
    )
    assert queue.status_code == 200, queue.text
    (shown,) = queue.json()["calls"]
    assert (shown["run_id"], shown["call_id"], shown["status"]) == (
        call.run_id,
        call.call_id,
        "outcome_unknown",
    )
    assert "args" not in shown and "card" not in queue.text
    reveals = "reveal:" + call_stream(call.run_id, call.call_id).removeprefix("call:")
    before = await journal.stream_version(reveals)
    for method, path, params in (
        ("GET", "/v1/calls", {"run_id": call.run_id}),
        ("GET", "/v1/calls", {"status": "succeeded"}),
        ("GET", "/v1/calls/story", ids(call)),
        ("POST", "/v1/calls/reveal", None),
        ("GET", "/v1/ledger/digest", None),
        ("GET", "/v1/ledger/export", None),
    ):
        response = await api.client.request(
            method, path, params=params, json=ids(call), headers=api.reviewer
        )
        assert response.status_code == 403, (path, params, response.text)
        assert response.json()["error"] == "forbidden"
    assert before == await journal.stream_version(reveals) == 0  # a refused reveal records nothing


async def test_a_reviewer_resolves_an_outcome_unknown_call_and_it_never_runs_again(
    api: Api, worker: ToolLedger, db: Database, journal: Journal
) -> None:
    call = await unknown_call(worker)
    body = resolution(call, note="seen in the provider's dashboard")
    response = await api.client.post("/v1/calls/resolve", json=body, headers=api.reviewer)
    assert response.status_code == 200, response.text
    shown = response.json()
    assert (shown["status"], shown["resolved_by"]) == ("succeeded", api.reviewer_id)

    record = await worker.get(call.run_id, call.call_id)
    assert (record.status, record.resolved_by) == (CallStatus.SUCCEEDED, api.reviewer_id)
    events = await journal.read_stream(call_stream(call.run_id, call.call_id))
    assert [e.type for e in events] == ["call.started", "call.outcome_unknown", "call.resolved"]
    resolved = events[-1]
    assert resolved.actor == api.reviewer_id and resolved.data["signature"]["key_id"]

    tool = Refunds()
    again = await worker.execute(call, tool)
    assert (again.status, again.replayed, tool.runs) == (CallStatus.SUCCEEDED, True, 0)

    # The same verdict again is the same answer and records nothing; another verdict conflicts.
    retry = await api.client.post("/v1/calls/resolve", json=body, headers=api.reviewer)
    assert retry.status_code == 200, retry.text
    assert retry.headers["idempotent-replayed"] == "true"
    assert retry.json() == shown
    other = await api.client.post(
        "/v1/calls/resolve", json=resolution(call, "failed"), headers=api.reviewer
    )
    assert other.status_code == 409 and other.json()["error"] == "conflict"
    someone_else = await token_for(db, unique("sam"))
    late = await api.client.post("/v1/calls/resolve", json=body, headers=someone_else)
    assert late.status_code == 409 and api.reviewer_id in late.json()["message"]
    assert len(await journal.read_stream(call_stream(call.run_id, call.call_id))) == 3


async def test_a_reviewer_sees_and_settles_only_calls_whose_approval_admits_it(
    api: Api, worker: ToolLedger, store: ApprovalStore, db: Database, journal: Journal
) -> None:
    group, member = unique("leads"), unique("mia")
    await ReviewerDirectory(db).add(member, [group], by="admin")
    call = refund(unique("run/http"))
    approval = await store.request(
        run_id=call.run_id,
        tool=call.tool,
        args=call.args,
        call_id=call.call_id,
        requested_by="agent",
        policy=ApprovalPolicy(approvers=frozenset({f"group:{group}"})),
    )
    await store.decide(approval.approval_id, Decision.approve(), member)
    consumer = ApprovalStore(worker.db, worker.ring)
    gate = approval_gate(consumer, approval.approval_id, f"{call.run_id}/{call.call_id}", call.args)
    outcome = await worker.execute(call, Refunds(fails=True), gate=gate)
    await consumer.close()
    assert outcome.status is CallStatus.OUTCOME_UNKNOWN
    queue = f"/v1/calls?status=outcome_unknown&run_id={call.run_id}"

    # api.reviewer is in no group of the policy: the call is not its to see or settle.
    assert (await api.client.get(queue, headers=api.reviewer)).json()["calls"] == []
    refused = await api.client.post(
        "/v1/calls/resolve", json=resolution(call), headers=api.reviewer
    )
    assert refused.status_code == 403, refused.text
    stream = call_stream(call.run_id, call.call_id)
    assert [e.type for e in await journal.read_stream(stream)][-1] == "call.outcome_unknown"

    insider = await token_for(db, member)
    assert [
        c["call_id"] for c in (await api.client.get(queue, headers=insider)).json()["calls"]
    ] == [call.call_id]
    settled = await api.client.post("/v1/calls/resolve", json=resolution(call), headers=insider)
    assert settled.status_code == 200 and settled.json()["resolved_by"] == member

    # The story of what it decided is one request away for the reviewer the policy admits.
    story = await api.client.get("/v1/calls/story", params=ids(call), headers=insider)
    assert story.status_code == 200, story.text
    assert [e["type"] for e in story.json()["events"]][-1] == "call.resolved"
    outside = await api.client.get("/v1/calls/story", params=ids(call), headers=api.reviewer)
    assert outside.status_code == 403 and outside.json()["error"] == "forbidden"


async def test_resolving_is_refused_to_auditors_and_for_calls_whose_outcome_is_known(
    api: Api, worker: ToolLedger, db: Database, journal: Journal
) -> None:
    unknown = await unknown_call(worker)
    by_auditor = await api.client.post(
        "/v1/calls/resolve", json=resolution(unknown), headers=api.auditor
    )
    assert by_auditor.status_code == 403, by_auditor.text
    assert (await worker.get(unknown.run_id, unknown.call_id)).status is CallStatus.OUTCOME_UNKNOWN

    known = await succeeded_call(worker)
    stream = call_stream(known.run_id, known.call_id)
    version = await journal.stream_version(stream)
    for status in ("succeeded", "failed"):
        refused = await api.client.post(
            "/v1/calls/resolve", json=resolution(known, status), headers=api.reviewer
        )
        assert refused.status_code == 409, refused.text
        assert "not outcome_unknown" in refused.json()["message"]
    assert await journal.stream_version(stream) == version
    record = await worker.get(known.run_id, known.call_id)
    assert (record.status, record.resolved_by) == (CallStatus.SUCCEEDED, None)

    missing = await api.client.post(
        "/v1/calls/resolve", json=resolution(refund(unique("nobody"))), headers=api.reviewer
    )
    assert missing.status_code == 404, missing.text
    for bad in (
        resolution(unknown, "maybe"),
        {**resolution(unknown), "by": "someone-else"},
        {"run_id": unknown.run_id, "status": "succeeded"},
    ):
        invalid = await api.client.post("/v1/calls/resolve", json=bad, headers=api.reviewer)
        assert invalid.status_code == 422, (bad, invalid.text)
    assert (await worker.get(unknown.run_id, unknown.call_id)).status is CallStatus.OUTCOME_UNKNOWN


async def test_an_auditor_reads_calls_page_by_page_and_a_story_without_arguments(
    api: Api, worker: ToolLedger
) -> None:
    run_id = unique("run/pages")
    calls = [await succeeded_call(worker, run_id, n) for n in range(5)]
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        params: dict[str, Any] = {"run_id": run_id, "limit": 2}
        if cursor is not None:
            params["cursor"] = cursor
        page = await api.client.get("/v1/calls", params=params, headers=api.auditor)
        assert page.status_code == 200, page.text
        pages += 1
        seen += [c["call_id"] for c in page.json()["calls"]]
        cursor = page.json()["next_cursor"]
        if cursor is None:
            break
    assert (seen, pages) == ([c.call_id for c in calls], 3)
    first_at = (await worker.get(run_id, calls[0].call_id)).started_at.isoformat()
    forged = base64.urlsafe_b64encode(json.dumps([first_at, "x\x00", "c"]).encode()).decode()
    edge = base64.urlsafe_b64encode(json.dumps(["0001-01-01T00:00:00+14:00", "r", "c"]).encode())
    for cursor in ("nope", forged, edge.decode()):
        bad = await api.client.get("/v1/calls", params={"cursor": cursor}, headers=api.auditor)
        assert bad.status_code == 422, bad.text
    # Times whose UTC is outside datetime's range are refused, not a 500.
    for name, moment in (
        ("since", "0001-01-01T00:00:00+14:00"),
        ("until", "9999-12-31T23:00-14:00"),
    ):
        bad = await api.client.get("/v1/calls", params={name: moment}, headers=api.auditor)
        assert bad.status_code == 422, bad.text
    local = await api.client.get(
        "/v1/calls",
        params={"run_id": run_id, "since": "2000-01-01T00:00:00+14:00"},
        headers=api.auditor,
    )
    assert [c["call_id"] for c in local.json()["calls"]] == [c.call_id for c in calls]

    story = await api.client.get("/v1/calls/story", params=ids(calls[0]), headers=api.auditor)
    assert story.status_code == 200, story.text
    document = story.json()
    assert document["call"]["call_id"] == calls[0].call_id
    assert [e["type"] for e in document["events"]] == ["call.started", "call.succeeded"]
    async with worker.db.connection() as conn:  # the login that wrote them, as stamped
        login = await conn.fetchval("SELECT session_user")
    assert [e["login"] for e in document["events"]] == [login, login]
    # The arguments' keys, not their digits, which a digest or a time may hold by chance.
    assert "args" not in document and '"card"' not in story.text and '"amount"' not in story.text
    unknown = await api.client.get(
        "/v1/calls/story", params=ids(refund(unique("nobody"))), headers=api.auditor
    )
    assert unknown.status_code == 404
    for params in ({"run_id": "x\x00y", "call_id": "c"}, {"run_id": " ", "call_id": "c"}):
        refused = await api.client.get("/v1/calls/story", params=params, headers=api.auditor)
        assert refused.status_code == 422, refused.text
    nul = await api.client.get("/v1/calls", params={"tool": "x\x00y"}, headers=api.auditor)
    assert nul.status_code == 422, nul.text


async def test_a_reveal_shows_the_arguments_and_is_journaled_under_the_auditor(
    api: Api, worker: ToolLedger, journal: Journal
) -> None:
    call = await succeeded_call(worker)
    reveal_stream = "reveal:" + call_stream(call.run_id, call.call_id).removeprefix("call:")
    response = await api.client.post("/v1/calls/reveal", json=ids(call), headers=api.auditor)
    assert response.status_code == 200, response.text
    shown = response.json()
    assert (shown["args"], shown["result"]) == (call.args, "refunded 120")
    (event,) = await journal.read_stream(reveal_stream)
    assert (event.type, event.actor) == ("ledger.revealed", api.auditor_id)
    assert (event.data["run_id"], event.data["call_id"]) == (call.run_id, call.call_id)

    missing = await api.client.post(
        "/v1/calls/reveal", json=ids(refund(unique("nobody"))), headers=api.auditor
    )
    assert missing.status_code == 404
    assert len(await journal.read_stream(reveal_stream)) == 1


async def test_a_reveal_with_a_request_id_is_journaled_once_and_answered_alike(
    api: Api, worker: ToolLedger, journal: Journal
) -> None:
    call = await succeeded_call(worker)
    reveal_stream = "reveal:" + call_stream(call.run_id, call.call_id).removeprefix("call:")
    key = {**api.auditor, "Idempotency-Key": unique("key")}
    first = await api.client.post("/v1/calls/reveal", json=ids(call), headers=key)
    again = await api.client.post("/v1/calls/reveal", json=ids(call), headers=key)
    assert first.status_code == again.status_code == 200, again.text
    assert first.json() == again.json()
    assert "idempotent-replayed" not in first.headers
    assert again.headers["idempotent-replayed"] == "true"
    (event,) = await journal.read_stream(reveal_stream)
    assert (event.actor, event.data["request_id"]) == (api.auditor_id, key["Idempotency-Key"])
    # The same key in the body is the same request.
    in_body = {**ids(call), "request_id": key["Idempotency-Key"]}
    by_field = await api.client.post("/v1/calls/reveal", json=in_body, headers=api.auditor)
    assert by_field.status_code == 200 and by_field.json() == first.json()
    assert len(await journal.read_stream(reveal_stream)) == 1

    # Without a key, or with another, each reveal is recorded.
    for headers in (api.auditor, api.auditor, {**api.auditor, "Idempotency-Key": unique("k")}):
        shown = await api.client.post("/v1/calls/reveal", json=ids(call), headers=headers)
        assert shown.status_code == 200 and shown.json() == first.json()
    events = await journal.read_stream(reveal_stream)
    assert len(events) == 4 and all("request_id" not in e.data for e in events[1:3])
    differ = await api.client.post(
        "/v1/calls/reveal", json={**ids(call), "request_id": "other"}, headers=key
    )
    assert differ.status_code == 422, differ.text
    assert len(await journal.read_stream(reveal_stream)) == 4


async def test_digests_and_proofs_over_http_verify_offline(
    api: Api, worker: ToolLedger, db: Database, journal: Journal, ring: KeyRing
) -> None:
    keys = signing_keys(ring)
    call = await succeeded_call(worker)
    (started, *_) = await journal.read_stream(call_stream(call.run_id, call.call_id))
    await settle(db)  # a digest covers what is below the (cluster-wide) horizon

    first = await api.client.get("/v1/ledger/digest", headers=api.auditor)
    assert first.status_code == 200, first.text
    old = Digest.from_dict(first.json())
    check_digest(old, keys)
    assert old.last_position >= started.position

    proved = await api.client.post(
        "/v1/ledger/proofs/inclusion",
        json={"position": started.position, "digest": first.json()},
        headers=api.auditor,
    )
    assert proved.status_code == 200, proved.text
    proof = InclusionProof.from_json(proved.text)
    check_inclusion(old, proof, keys)
    assert (proof.event.stream_id, proof.event.type) == (started.stream_id, "call.started")
    altered = Digest.from_dict({**first.json(), "tree_size": old.tree_size + 1})
    with pytest.raises(Invalid):
        check_inclusion(altered, proof, keys)

    await succeeded_call(worker)  # the journal grows
    await settle(db)
    second = await api.client.get("/v1/ledger/digest", headers=api.auditor)
    new = Digest.from_dict(second.json())
    assert new.tree_size > old.tree_size
    extended = await api.client.post(
        "/v1/ledger/proofs/consistency",
        json={"old": first.json(), "new": second.json()},
        headers=api.auditor,
    )
    assert extended.status_code == 200, extended.text
    check_consistency(old, new, ConsistencyProof.from_json(extended.text), keys)

    backwards = await api.client.post(
        "/v1/ledger/proofs/consistency",
        json={"old": second.json(), "new": first.json()},
        headers=api.auditor,
    )
    assert backwards.status_code == 422, backwards.text
    forged = {**first.json(), "root": "00" * 32}
    mismatch = await api.client.post(
        "/v1/ledger/proofs/inclusion",
        json={"position": started.position, "digest": forged},
        headers=api.auditor,
    )
    assert mismatch.status_code == 409 and mismatch.json()["error"] == "digest_mismatch"
    malformed = await api.client.post(
        "/v1/ledger/proofs/inclusion",
        json={"position": started.position, "digest": {"tree_size": 3}},
        headers=api.auditor,
    )
    assert malformed.status_code == 422, malformed.text
    beyond = await api.client.post(
        "/v1/ledger/proofs/inclusion",
        json={"position": new.last_position + 1000, "digest": first.json()},
        headers=api.auditor,
    )
    assert beyond.status_code == 404, beyond.text
    # A size past what any journal holds (PostgreSQL's bigint) is a malformed digest, not 500.
    for huge in ({"tree_size": 2**63}, {"last_position": 10**30}):
        for path, body in (
            ("/v1/ledger/proofs/inclusion", {"position": 1, "digest": first.json() | huge}),
            ("/v1/ledger/proofs/consistency", {"old": first.json(), "new": second.json() | huge}),
        ):
            refused = await api.client.post(path, json=body, headers=api.auditor)
            assert refused.status_code == 422, (path, huge, refused.text)


async def test_the_export_pages_through_the_journal_with_hashes_that_recompute(
    api: Api, worker: ToolLedger, db: Database, journal: Journal
) -> None:
    first, call = await succeeded_call(worker), await succeeded_call(worker)
    (*_, after_first) = await journal.read_stream(call_stream(first.run_id, first.call_id))
    started, succeeded = await journal.read_stream(call_stream(call.run_id, call.call_id))
    after = after_first.position
    await settle(db)  # the export reads what is below the (cluster-wide) horizon
    exported: list[ExportedEvent] = []
    while True:
        page = await api.client.get(
            "/v1/ledger/export", params={"after": after, "limit": 1}, headers=api.auditor
        )
        assert page.status_code == 200, page.text
        exported += [ExportedEvent.from_dict(e) for e in page.json()["events"]]
        if page.json()["next_after"] is None or len(exported) >= 50:
            break
        after = page.json()["next_after"]
    positions = [e.position for e in exported]
    assert started.position in positions and succeeded.position in positions
    for event in exported:
        assert event.recomputed_hash() == event.hash
    mine = [e for e in exported if e.position in (started.position, succeeded.position)]
    assert [(e.tag_version, e.login) for e in mine] == [(3, started.login), (3, succeeded.login)]
    assert started.login is not None
    unknown = await api.client.get(
        "/v1/ledger/export", params={"after": 10**12}, headers=api.auditor
    )
    assert unknown.status_code == 422, unknown.text


async def test_a_resolution_with_an_idempotency_key_records_it_and_replays_by_it(
    api: Api, worker: ToolLedger, journal: Journal
) -> None:
    """Resolve as decide does: the key is in the `call.resolved` event; the same key again
    gets the same answer and records nothing; the same key with another verdict is 409 (the
    key names a request whose answer is recorded: the new body conflicts with that record, it
    is not malformed); a new key for the settled call is a new request, and conflicts too."""
    call = await unknown_call(worker)
    key = {"Idempotency-Key": unique("resolve")}
    body = resolution(call, request_id=None)  # the key in its header alone
    first = await api.client.post("/v1/calls/resolve", json=body, headers=api.reviewer | key)
    assert first.status_code == 200, first.text
    stream = call_stream(call.run_id, call.call_id)
    events = await journal.read_stream(stream)
    assert events[-1].type == "call.resolved"
    assert events[-1].data["request_id"] == key["Idempotency-Key"]

    retry = await api.client.post("/v1/calls/resolve", json=body, headers=api.reviewer | key)
    assert (retry.status_code, retry.json()) == (200, first.json())
    assert retry.headers["idempotent-replayed"] == "true"
    other = resolution(call, "failed", request_id=None)
    changed = await api.client.post("/v1/calls/resolve", json=other, headers=api.reviewer | key)
    assert changed.status_code == 409 and changed.json()["error"] == "conflict"
    again = {"Idempotency-Key": unique("resolve")}
    new = await api.client.post("/v1/calls/resolve", json=body, headers=api.reviewer | again)
    assert new.status_code == 409 and new.json()["error"] == "conflict"
    assert len(await journal.read_stream(stream)) == len(events)


async def test_a_reviewer_the_directory_does_not_list_reads_no_story_of_an_open_policy(
    api: Api, worker: ToolLedger, store: ApprovalStore, db: Database
) -> None:
    member = unique("lee")
    await ReviewerDirectory(db).add(member, [unique("any")], by="admin")
    call = refund(unique("run/http"))
    approval = await store.request(
        run_id=call.run_id,
        tool=call.tool,
        args=call.args,
        call_id=call.call_id,
        requested_by="agent",
        policy=ApprovalPolicy(any_reviewer=True),
    )
    await store.decide(approval.approval_id, Decision.approve(), member)
    consumer = ApprovalStore(worker.db, worker.ring)
    gate = approval_gate(consumer, approval.approval_id, f"{call.run_id}/{call.call_id}", call.args)
    await worker.execute(call, Refunds(), gate=gate)
    await consumer.close()

    listed = await api.client.get(
        "/v1/calls/story", params=ids(call), headers=await token_for(db, member)
    )
    assert listed.status_code == 200, listed.text
    # api.reviewer is in no directory: "any reviewer in the directory" is not it.
    unlisted = await api.client.get("/v1/calls/story", params=ids(call), headers=api.reviewer)
    assert unlisted.status_code == 403, unlisted.text
