"""The HTTP API over real HTTP: uvicorn in this process on a free loopback port, its database
login one that has only `signoff_reviewer`, callers with API tokens made by the owner."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from adapters.http.limits import FailureLimit
from adapters.http.server import running
from adapters.http.service import MAX_BODY_BYTES, open_service
from approvals import (
    ApiTokens,
    Approval,
    ApprovalPolicy,
    ApprovalStatus,
    ApprovalStore,
    DecisionKind,
    ReviewerDirectory,
)
from ledger.health import CHECKS
from ledger.journal import Journal
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.logins import temporary_login
from ledger.store.settings import Settings

from .support.http import ask, bearer, every_pending, token_for, unique
from .support.processes import ROOT, TEST_KEK, TEST_REVIEWER_KEK, kek_env, run_cli, start_program


@dataclass
class Api:
    client: httpx.AsyncClient
    reviewer_url: str
    port: int


@pytest.fixture(scope="module")
async def api(database_url: str, ring: KeyRing) -> AsyncIterator[Api]:
    async with temporary_login(database_url, "signoff_reviewer") as url:
        settings = Settings(
            database_url=url, kek=LocalKek(TEST_KEK), reviewer_kek=LocalKek(TEST_REVIEWER_KEK)
        )
        # These tests present many refused tokens from one address on purpose; the limit on
        # them has tests of its own (test_http_metrics).
        service = await open_service(settings, pool_size=4, failure_limit=FailureLimit(1000))
        try:
            async with (
                running(service) as (_, port),
                httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as client,
            ):
                yield Api(client, url, port)
        finally:
            await service.close()


@dataclass
class Case:
    """One approval for a group of its own, a reviewer in it and one outside it."""

    approval: Approval
    member: dict[str, str]
    outsider: dict[str, str]
    run_id: str


async def a_case(
    db: Database,
    store: ApprovalStore,
    *,
    quorum: int = 1,
    allowed: frozenset[DecisionKind] = frozenset(DecisionKind),
) -> Case:
    group, member, outsider = unique("leads"), unique("ann"), unique("bob")
    directory = ReviewerDirectory(db)
    await directory.add(member, [group], by="admin")
    await directory.add(outsider, [unique("other")], by="admin")
    run_id = unique("http")
    approval = await store.request(
        run_id=run_id,
        tool="refund",
        args={"amount": 120},
        call_id="c1",
        requested_by="support-agent",
        policy=ApprovalPolicy(
            approvers=frozenset({f"group:{group}"}),
            quorum=quorum,
            allowed=allowed,
        ),
    )
    return Case(approval, await token_for(db, member), await token_for(db, outsider), run_id)


def decision(kind: str = "approve", **fields: Any) -> dict[str, Any]:
    return {"decision": kind, "request_id": uuid.uuid4().hex, **fields}


async def decided_events(journal: Journal, approval_id: str) -> list[Any]:
    events = await journal.read_stream(f"approval:{approval_id}")
    return [e for e in events if e.type == "approval.decided"]


async def test_health_and_readiness_need_no_token_and_say_nothing_else(api: Api) -> None:
    assert (await api.client.get("/healthz")).json() == {"status": "ok"}
    ready = await api.client.get("/readyz")
    checks = {name: "ok" for name in CHECKS}
    assert ready.status_code == 200 and ready.json() == {"status": "ready", "checks": checks}


async def test_the_openapi_document_is_served_under_v1(api: Api) -> None:
    response = await api.client.get("/v1/openapi.json")
    assert response.status_code == 200
    paths = response.json()["paths"]
    assert {"/v1/approvals", "/v1/approvals/{approval_id}", "/v1/approvals/events"} <= set(paths)
    assert "post" in paths["/v1/approvals/{approval_id}/decision"]


async def test_v1_answers_may_not_be_cached(api: Api, db: Database, store: ApprovalStore) -> None:
    """Answers name reviewers and calls, and a reveal carries arguments in clear: no browser or
    proxy may keep one, refusals included."""
    case = await a_case(db, store)
    answers = [
        await api.client.get("/v1/approvals", headers=case.member),
        await api.client.get(f"/v1/approvals/{case.approval.approval_id}", headers=case.member),
        await api.client.post(
            f"/v1/approvals/{case.approval.approval_id}/reveal", headers=case.member
        ),
        await api.client.get("/v1/approvals"),  # 401
        await api.client.get("/v1/approvals/apr-none", headers=case.member),  # 404
    ]
    assert [a.status_code for a in answers] == [200, 200, 200, 401, 404]
    assert [a.headers.get("cache-control") for a in answers] == ["no-store"] * len(answers)


async def test_no_token_or_a_bad_one_is_401_with_a_bearer_challenge(api: Api, db: Database) -> None:
    who = unique("carol")
    tokens = ApiTokens(db)
    revoked = await tokens.create(who, by="admin")
    await tokens.revoke(revoked.info.token_id, by="admin")
    expired = await tokens.create(who, by="admin")
    async with db.connection() as conn:
        await conn.execute(
            "UPDATE api_tokens SET created_at = now() - interval '2 days',"
            " expires_at = now() - interval '1 day' WHERE token_id = $1",
            expired.info.token_id,
        )
    good = await tokens.create(who, by="admin")
    wrong = good.token[:-4] + ("AAAA" if not good.token.endswith("AAAA") else "BBBB")
    cases: list[dict[str, str]] = [
        {},
        {"Authorization": "Basic YWxpY2U6c2VjcmV0"},
        {"Authorization": "Bearer"},
        {"Authorization": f"Bearer {wrong}"},
        {"Authorization": "Bearer not-a-token"},
        {"Authorization": f"Bearer {revoked.token}"},
        {"Authorization": f"Bearer {expired.token}"},
    ]
    for headers in cases:
        for method, path in (("GET", "/v1/approvals"), ("POST", "/v1/approvals/x/decision")):
            response = await api.client.request(method, path, headers=headers, json=decision())
            assert response.status_code == 401, (headers, response.text)
            assert response.headers["www-authenticate"].startswith("Bearer")
            assert response.json()["error"] == "unauthenticated"
    # One message whatever the reason: a revoked token is told apart from a wrong one by nobody.
    said = {(await api.client.get("/v1/approvals", headers=h)).json()["message"] for h in cases[3:]}
    assert said == {"invalid token"}
    ok = await api.client.get("/v1/approvals", headers={"Authorization": f"Bearer {good.token}"})
    assert ok.status_code == 200


@pytest.fixture
def auth_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """The authenticator's records (its logger does not propagate once configured)."""
    logger = logging.getLogger("signoff.adapters.http.auth")
    logger.addHandler(caplog.handler)
    caplog.set_level(logging.INFO, logger="signoff.adapters.http.auth")
    yield caplog
    logger.removeHandler(caplog.handler)


async def test_an_agent_token_is_refused_as_an_invalid_one(
    api: Api, db: Database, store: ApprovalStore, auth_log: pytest.LogCaptureFixture
) -> None:
    """An agent's token is for the MCP gateway: here it reads and decides nothing, and its
    refusal looks like any other (the log alone says why)."""
    agent = await ApiTokens(db).create(unique("agent"), scope="agent", by="admin")
    approval_id = await ask(store, agent.info.reviewer)  # even where a policy names it
    # Another last letter (never the same: that would be the agent's token itself).
    tampered = agent.token[:-1] + ("B" if agent.token.endswith("A") else "A")
    invalid = await api.client.get("/v1/approvals", headers=bearer(tampered))
    for method, path in (
        ("GET", "/v1/approvals"),
        ("GET", f"/v1/approvals/{approval_id}"),
        ("POST", f"/v1/approvals/{approval_id}/decision"),
    ):
        response = await api.client.request(
            method, path, headers=bearer(agent.token), json=decision()
        )
        assert response.status_code == 401, response.text
        assert (
            response.json()
            == invalid.json()
            == {
                "error": "unauthenticated",
                "message": "invalid token",
            }
        )
        assert response.headers["www-authenticate"] == invalid.headers["www-authenticate"]
    assert (await store.get(approval_id)).status is ApprovalStatus.PENDING
    refused = {  # a record reaches the handler once more through the root logger
        id(r)
        for r in auth_log.records
        if r.getMessage() == "credential refused"
        and getattr(r, "reason", None) == "CredentialScopeRefused"
        and agent.info.token_id in getattr(r, "problem", "")
    }
    assert len(refused) == 3, [r.__dict__ for r in auth_log.records]
    assert all(agent.token not in r.getMessage() for r in auth_log.records)


async def test_a_reviewer_outside_the_policy_sees_nothing_and_records_nothing(
    api: Api, db: Database, store: ApprovalStore, journal: Journal
) -> None:
    case = await a_case(db, store)
    approval_id = case.approval.approval_id
    mine = await every_pending(api.client, case.member)
    assert approval_id in {a["approval_id"] for a in mine}
    theirs = await every_pending(api.client, case.outsider)
    assert approval_id not in {a["approval_id"] for a in theirs}
    shown = await api.client.get(f"/v1/approvals/{approval_id}", headers=case.outsider)
    assert shown.status_code == 403

    refused = await api.client.post(
        f"/v1/approvals/{approval_id}/decision", headers=case.outsider, json=decision()
    )
    assert refused.status_code == 403, refused.text
    assert (await store.get(approval_id)).status is ApprovalStatus.PENDING
    events = await journal.read_stream(f"approval:{approval_id}")
    assert [e.type for e in events] == ["approval.requested"]


async def test_approving_records_a_signed_decision_by_the_token_s_reviewer(
    api: Api, db: Database, store: ApprovalStore, journal: Journal
) -> None:
    case = await a_case(db, store)
    approval_id = case.approval.approval_id
    shown = await api.client.get(f"/v1/approvals/{approval_id}", headers=case.member)
    assert shown.status_code == 200 and shown.json()["status"] == "pending"
    assert "args" not in shown.json()

    body = decision("approve", request_id="req-1")
    response = await api.client.post(
        f"/v1/approvals/{approval_id}/decision", headers=case.member, json=body
    )
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "approved"
    approval = await store.get(approval_id)
    assert approval.status is ApprovalStatus.APPROVED
    (event,) = await decided_events(journal, approval_id)
    member = approval.decided_by[0]
    assert event.actor == member and member.startswith("ann-")
    assert event.data["signature"]["key_id"] and event.data["request_id"] == "req-1"
    assert await store.problems(approval_id) == []


async def test_the_same_request_id_twice_is_recorded_once(
    api: Api, db: Database, store: ApprovalStore, journal: Journal
) -> None:
    case = await a_case(db, store, quorum=2)  # a retry must not count as a second approver
    url = f"/v1/approvals/{case.approval.approval_id}/decision"
    body = decision("approve")
    first = await api.client.post(url, headers=case.member, json=body)
    again = await api.client.post(url, headers=case.member, json=body)
    assert first.status_code == again.status_code == 200, again.text
    assert first.json()["status"] == again.json()["status"] == "pending"
    assert again.headers["idempotent-replayed"] == "true"
    assert len(await decided_events(journal, case.approval.approval_id)) == 1
    other_kind = await api.client.post(
        url, headers=case.member, json={**body, "decision": "reject"}
    )
    assert other_kind.status_code == 409
    second_vote = await api.client.post(url, headers=case.member, json=decision("approve"))
    assert second_vote.status_code == 409, second_vote.text  # one vote per reviewer
    assert len(await decided_events(journal, case.approval.approval_id)) == 1


async def test_a_conflicting_second_decision_is_409(
    api: Api, db: Database, store: ApprovalStore, journal: Journal
) -> None:
    case = await a_case(db, store)
    url = f"/v1/approvals/{case.approval.approval_id}/decision"
    assert (await api.client.post(url, headers=case.member, json=decision())).status_code == 200
    late = await api.client.post(
        url, headers=case.member, json=decision("reject", reason="changed my mind")
    )
    assert late.status_code == 409 and late.json()["error"] == "conflict"
    assert (await store.get(case.approval.approval_id)).status is ApprovalStatus.APPROVED
    assert len(await decided_events(journal, case.approval.approval_id)) == 1


async def test_malformed_decisions_are_422_and_record_nothing(
    api: Api, db: Database, store: ApprovalStore, journal: Journal
) -> None:
    case = await a_case(db, store)
    url = f"/v1/approvals/{case.approval.approval_id}/decision"
    for body in (
        {"decision": "approve"},  # no request id
        decision("maybe"),
        decision("edit"),
        decision("edit", args=[1]),
        decision("approve", by="someone-else"),
        decision("approve", request_id=""),
        decision("approve", request_id=7),
        decision("respond"),
        {**decision(), "type": "approve"},  # ours and HITL at once
        {"type": "accept", "args": None, "request_id": "r" * 201},
    ):
        response = await api.client.post(url, headers=case.member, json=body)
        assert response.status_code == 422, (body, response.text)
    bad_json = await api.client.post(
        url, headers={**case.member, "Content-Type": "application/json"}, content=b"{"
    )
    assert bad_json.status_code == 422
    # Not an object (422); nested too deep for the JSON reader (400, the framework's answer).
    for content, status in ((b'["approve"]', 422), (b"[" * 30_000 + b"]" * 30_000, 400)):
        not_object = await api.client.post(
            url, headers={**case.member, "Content-Type": "application/json"}, content=content
        )
        assert not_object.status_code == status, not_object.text
    differ = await api.client.post(
        url, headers={**case.member, "Idempotency-Key": "a"}, json=decision(request_id="b")
    )
    assert differ.status_code == 422 and "differ" in differ.json()["message"]
    assert await decided_events(journal, case.approval.approval_id) == []


async def test_a_hitl_decision_and_an_agent_inbox_response_decide_over_http(
    api: Api, db: Database, store: ApprovalStore, journal: Journal
) -> None:
    hitl, inbox = await a_case(db, store), await a_case(db, store)
    edited = {"amount": 60}
    response = await api.client.post(
        f"/v1/approvals/{hitl.approval.approval_id}/decision",
        headers={**hitl.member, "Idempotency-Key": "hitl-1"},
        json={"type": "edit", "edited_action": {"name": "refund", "args": edited}},
    )
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "edited"
    decided = await store.get(hitl.approval.approval_id, reveal=True)
    assert decided.decision is not None and decided.decision.args == edited
    (event,) = await decided_events(journal, hitl.approval.approval_id)
    assert event.data["request_id"] == "hitl-1"

    url = f"/v1/approvals/{inbox.approval.approval_id}/decision"
    human_response = {"type": "ignore", "args": None}
    headers = {**inbox.member, "Idempotency-Key": uuid.uuid4().hex}
    first = await api.client.post(url, headers=headers, json=human_response)
    assert first.status_code == 200, first.text
    assert first.json()["status"] == "rejected"
    again = await api.client.post(url, headers=headers, json=human_response)  # a retry
    assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true"
    assert len(await decided_events(journal, inbox.approval.approval_id)) == 1


async def test_an_approval_carries_its_hitl_and_agent_inbox_shapes_without_arguments(
    api: Api, db: Database, store: ApprovalStore
) -> None:
    case = await a_case(db, store)
    shown = (
        await api.client.get(f"/v1/approvals/{case.approval.approval_id}", headers=case.member)
    ).json()
    assert shown in await every_pending(api.client, case.member)
    assert shown["allowed_decisions"] == ["approve", "reject", "edit", "respond"]
    (action,) = shown["hitl"]["action_requests"]
    assert action["name"] == "refund" and action["args"] is None
    assert shown["agent_inbox"]["action_request"] == {"action": "refund", "args": None}
    assert shown["agent_inbox"]["config"]["allow_accept"] is True
    # The arguments' key, not their digits, which a digest or a time may hold by chance.
    assert "args" not in shown and '"amount"' not in json.dumps(shown)


async def test_a_decision_the_policy_does_not_allow_is_403_and_records_nothing(
    api: Api, db: Database, store: ApprovalStore, journal: Journal
) -> None:
    case = await a_case(db, store, allowed=frozenset({DecisionKind.APPROVE}))
    approval = case.approval
    url = f"/v1/approvals/{approval.approval_id}/decision"
    for body in (decision("reject"), {"type": "response", "args": "no", "request_id": "x"}):
        refused = await api.client.post(url, headers=case.member, json=body)
        assert refused.status_code == 403, refused.text
    assert await decided_events(journal, approval.approval_id) == []


async def test_an_oversized_body_is_413(api: Api, db: Database, store: ApprovalStore) -> None:
    case = await a_case(db, store)
    url = f"/v1/approvals/{case.approval.approval_id}/decision"
    big = decision("edit", args={"note": "x" * (MAX_BODY_BYTES + 1)})
    response = await api.client.post(url, headers=case.member, json=big)
    assert response.status_code == 413 and response.json()["error"] == "too_large"

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it arrives
        text = json.dumps(big).encode()
        for start in range(0, len(text), 16384):
            yield text[start : start + 16384]

    chunked = await api.client.post(
        url, headers={**case.member, "Content-Type": "application/json"}, content=chunks()
    )
    assert chunked.status_code == 413
    assert (await store.get(case.approval.approval_id)).status is ApprovalStatus.PENDING


async def test_an_auditor_reads_every_approval_and_decides_none(
    api: Api, db: Database, store: ApprovalStore, journal: Journal
) -> None:
    case = await a_case(db, store)
    auditor = await token_for(db, unique("audit"), scope="auditor")
    approval_id = case.approval.approval_id
    shown = await api.client.get(f"/v1/approvals/{approval_id}", headers=auditor)
    assert shown.status_code == 200
    listed = await api.client.get("/v1/approvals", params={"run_id": case.run_id}, headers=auditor)
    assert [a["approval_id"] for a in listed.json()["approvals"]] == [approval_id]
    refused = await api.client.post(
        f"/v1/approvals/{approval_id}/decision", headers=auditor, json=decision()
    )
    assert refused.status_code == 403
    assert await decided_events(journal, approval_id) == []


async def test_pending_approvals_come_in_pages_filtered_by_run_and_tool(
    api: Api, db: Database, store: ApprovalStore
) -> None:
    group, member = unique("leads"), unique("dan")
    await ReviewerDirectory(db).add(member, [group], by="admin")
    headers = await token_for(db, member)
    run_id = unique("pages")
    policy = ApprovalPolicy(approvers=frozenset({f"group:{group}"}))
    made = [
        await store.request(
            run_id=run_id,
            tool="refund" if i < 3 else "email",
            args={"i": i},
            call_id=f"c{i}",
            requested_by="agent",
            policy=policy,
        )
        for i in range(4)
    ]
    seen: list[str] = []
    params: dict[str, Any] = {"run_id": run_id, "tool": "refund", "limit": 2}
    while True:
        page = (await api.client.get("/v1/approvals", params=params, headers=headers)).json()
        seen += [a["approval_id"] for a in page["approvals"]]
        assert len(page["approvals"]) <= 2
        if page["next_cursor"] is None:
            break
        params["cursor"] = page["next_cursor"]
    assert seen == [a.approval_id for a in made[:3]]
    bad = await api.client.get("/v1/approvals", params={"cursor": "zz"}, headers=headers)
    assert bad.status_code == 422
    unknown = await api.client.get("/v1/approvals/apr-nothing", headers=headers)
    assert unknown.status_code == 404


async def test_a_decision_by_api_wakes_a_worker_in_another_process_which_runs_the_tool_once(
    api: Api, db: Database, store: ApprovalStore, database_url: str
) -> None:
    case = await a_case(db, store)
    approval_id = case.approval.approval_id
    worker_env = {**kek_env(), "SIGNOFF_REVIEWER_KEK": ""}  # an agent worker holds none
    async with temporary_login(database_url, "signoff_app") as worker_url:
        process = await start_program(
            "tests.support.http_workers", worker_url, approval_id, case.run_id, "c1", "120",
            env=worker_env,
        )  # fmt: skip
        assert process.stdout is not None
        try:
            ready = await asyncio.wait_for(process.stdout.readline(), 60)
            assert ready.decode().strip() == "ready"
            response = await api.client.post(
                f"/v1/approvals/{approval_id}/decision", headers=case.member, json=decision()
            )
            assert response.status_code == 200, response.text
            stdout, stderr = await asyncio.wait_for(process.communicate(), 120)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    assert process.returncode == 0, stderr.decode()[-2000:]
    result = json.loads(stdout.decode().strip().splitlines()[-1])
    assert result == {
        "approval": "approved",
        "status": "succeeded",
        "runs": 1,
        "result": {"refunded": 120},
        "can_sign": False,
    }
    assert (await store.get(approval_id)).consumed


async def test_serve_refuses_to_start_without_what_it_needs(database_url: str) -> None:
    env = {k: v for k, v in kek_env().items() if not k.startswith("SIGNOFF_REVIEWER_KEK")}
    no_kek = await run_cli("serve", "--port", "0", database_url=database_url, env=env)
    assert no_kek.code == 2 and "SIGNOFF_REVIEWER_KEK" in no_kek.stderr
    assert len(no_kek.stderr.strip().splitlines()) == 1
    async with temporary_login(database_url, "signoff_app") as worker_url:
        worker = await run_cli("serve", "--port", "0", database_url=worker_url, env=kek_env())
    assert worker.code == 2 and "signoff_reviewer" in worker.stderr, worker.stderr
    exposed = await run_cli(
        "serve", "--dev", "--host", "0.0.0.0", "--port", "0",
        database_url=database_url, env=kek_env(),
    )  # fmt: skip
    assert exposed.code == 2 and "loopback" in exposed.stderr


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


async def test_requests_are_logged_with_their_ids_and_never_a_token_or_arguments(
    api: Api, db: Database, store: ApprovalStore
) -> None:
    case = await a_case(db, store)
    approval_id = case.approval.approval_id
    secret_args = {"note": f"private-{uuid.uuid4().hex}"}
    handler, logger = Records(), logging.getLogger("signoff")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        await api.client.get("/v1/approvals", headers={"Authorization": "Bearer sgf_nothing"})
        response = await api.client.post(
            f"/v1/approvals/{approval_id}/decision",
            headers=case.member,
            json=decision("edit", args=secret_args),
        )
        assert response.status_code == 200, response.text
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    text = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in handler.records)
    for secret in (case.member["Authorization"].split()[1], "sgf_nothing", secret_args["note"]):
        assert secret not in text
    decided = [r for r in handler.records if r.getMessage() == "decided"]
    assert [getattr(r, "approval_id", None) for r in decided] == [approval_id]
    logged = [r for r in handler.records if r.getMessage() == "request"]
    assert {getattr(r, "status", None) for r in logged} == {401, 200}
    assert any(str(getattr(r, "reviewer", "")).startswith("ann-") for r in logged)


async def test_dev_mode_serves_on_loopback_with_a_one_time_token_it_prints_loudly(
    database_url: str, db: Database
) -> None:
    reviewer = unique("devon")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "adapters.cli", "serve", "--dev", "--dev-reviewer", reviewer,
        "--port", "0", "--json",
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**kek_env(), "PYTHONPATH": str(ROOT), "SIGNOFF_DATABASE_URL": database_url},
    )  # fmt: skip
    assert process.stdout is not None
    try:
        line = await asyncio.wait_for(process.stdout.readline(), 60)
        assert line, "the service exited before it listened"
        started = json.loads(line)
        assert started["dev_reviewer"] == reviewer and started["url"].startswith("http://127.")
        token = started["dev_token"]
        async with httpx.AsyncClient(base_url=started["url"], timeout=30) as client:
            anonymous = await client.get("/v1/approvals")
            assert anonymous.status_code == 401
            mine = await client.get("/v1/approvals", headers={"Authorization": f"Bearer {token}"})
            assert mine.status_code == 200, mine.text
            wrong = await client.get(
                "/v1/approvals", headers={"Authorization": f"Bearer {token[:-2]}xx"}
            )
            assert wrong.status_code == 401
    finally:
        process.terminate()
        _, stderr = await process.communicate()
    said = stderr.decode()
    assert "DEVELOPMENT MODE" in said and reviewer in said and token in said
    assert f"{started['url']}/inbox#token={token}" in said  # a sign-in link to the inbox


async def test_serve_without_any_active_token_refuses_to_start(fresh_database_url: str) -> None:
    async with await Database.connect(fresh_database_url) as fresh:  # the owner makes the keys
        await KeyRing.open(fresh, LocalKek(TEST_KEK))
    refused = await run_cli("serve", "--port", "0", database_url=fresh_database_url, env=kek_env())
    assert refused.code == 2, refused.stderr
    assert "signoff tokens create" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
