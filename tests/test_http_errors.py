"""One table from the library's typed errors to the API's answers (`adapters.http.errors`):
every type it lists answers its status, code and message through the handler the app installs,
the most derived listed type wins, an unlisted error is a 500 naming no value; and routes that
let library errors through answer as the table says."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import httpx
import pytest
from fastapi import FastAPI

from adapters.http.errors import ERROR_TABLE, install_error_handlers, refusal_of
from adapters.http.server import running
from adapters.http.service import open_service
from approvals.errors import (
    ApprovalAlreadyDecided,
    ApprovalExpired,
    DecisionNotAllowed,
    InvalidApprovalRequest,
    UnknownApproval,
)
from approvals.policies import (
    InvalidPolicySet,
    PolicyConflict,
    PolicyNotPermitted,
    UnknownPolicySet,
)
from ledger.errors import (
    CallStateError,
    DatabaseUnavailable,
    DigestError,
    DigestMismatch,
    InvalidEvent,
    InvalidToolCall,
    NoActiveKey,
    NotInDigest,
    SignoffError,
    UnknownCall,
)
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.logins import temporary_login
from ledger.store.settings import Settings

from .support.http import token_for, unique
from .support.processes import TEST_KEK, TEST_REVIEWER_KEK

# One example of every type the table lists, and the status it must answer: a type added to
# the table without a row here fails `test_every_listed_error_has_an_example`.
EXAMPLES: dict[type[SignoffError], tuple[SignoffError, int, str]] = {
    UnknownApproval: (UnknownApproval("a-1"), 404, "not_found"),
    UnknownCall: (UnknownCall("run-1", "call-1"), 404, "not_found"),
    NotInDigest: (NotInDigest(7, 3), 404, "not_found"),
    DecisionNotAllowed: (DecisionNotAllowed("a-1", "not an approver"), 403, "forbidden"),
    ApprovalAlreadyDecided: (ApprovalAlreadyDecided("a-1", "approved already"), 409, "conflict"),
    ApprovalExpired: (ApprovalExpired("a-1"), 409, "expired"),
    CallStateError: (CallStateError("the call succeeded"), 409, "conflict"),
    DigestMismatch: (DigestMismatch("root differs"), 409, "digest_mismatch"),
    DigestError: (DigestError("tree sizes go backwards"), 422, "invalid"),
    InvalidApprovalRequest: (InvalidApprovalRequest("no such decision"), 422, "invalid"),
    InvalidPolicySet: (InvalidPolicySet(["typo: no attribute amout"]), 422, "invalid"),
    PolicyNotPermitted: (PolicyNotPermitted("alice"), 403, "forbidden"),
    PolicyConflict: (PolicyConflict(3, 4), 409, "conflict"),
    UnknownPolicySet: (UnknownPolicySet(7), 404, "not_found"),
    InvalidToolCall: (InvalidToolCall("args are not an object"), 422, "invalid"),
    InvalidEvent: (InvalidEvent("no event at position 9"), 422, "invalid"),
    NoActiveKey: (NoActiveKey("digest_signing"), 503, "unavailable"),
    DatabaseUnavailable: (DatabaseUnavailable("postgresql://db", "refused"), 503, "unavailable"),
}


class Unlisted(SignoffError):
    """A library error the table does not name."""


def probe_app() -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)

    @app.get("/raise/{name}")
    async def raise_it(name: str) -> None:
        if name == "Unlisted":
            raise Unlisted("secret-value-42")
        raise next(e for e, _, _ in EXAMPLES.values() if type(e).__name__ == name)

    return app


@pytest.fixture
async def probe() -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=probe_app(), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://probe") as client:
        yield client


def test_every_listed_error_has_an_example() -> None:
    assert set(EXAMPLES) == set(ERROR_TABLE)


@pytest.mark.parametrize("kind", list(EXAMPLES), ids=lambda kind: kind.__name__)
async def test_each_listed_error_answers_its_status_code_and_message(
    probe: httpx.AsyncClient, kind: type[SignoffError]
) -> None:
    error, status, code = EXAMPLES[kind]
    response = await probe.get(f"/raise/{kind.__name__}")
    assert response.status_code == status, response.text
    refusal = refusal_of(error)
    assert refusal is not None
    assert response.json() == {"error": code, "message": refusal.message(error)}


def test_the_most_derived_listed_type_wins() -> None:
    assert refusal_of(DigestMismatch("x")) is ERROR_TABLE[DigestMismatch]
    assert refusal_of(NotInDigest(1, 0)) is ERROR_TABLE[NotInDigest]
    assert refusal_of(DigestError("x")) is ERROR_TABLE[DigestError]
    assert refusal_of(Unlisted("x")) is None


async def test_an_approval_message_drops_the_id_the_url_names(probe: httpx.AsyncClient) -> None:
    response = await probe.get("/raise/ApprovalExpired")
    assert response.json()["message"] == "the approval expired before a decision"
    forbidden = await probe.get("/raise/DecisionNotAllowed")
    assert forbidden.json()["message"] == "not an approver"


async def test_an_unlisted_error_is_a_500_that_names_no_value(probe: httpx.AsyncClient) -> None:
    response = await probe.get("/raise/Unlisted")
    assert response.status_code == 500
    assert "secret-value-42" not in response.text


# -- over the routes ------------------------------------------------------------------------


@dataclass
class Served:
    client: httpx.AsyncClient
    reviewer: dict[str, str]
    auditor: dict[str, str]


@pytest.fixture(scope="module")
async def served(database_url: str, db: Database, ring: KeyRing) -> AsyncIterator[Served]:
    async with temporary_login(database_url, "signoff_reviewer") as url:
        settings = Settings(
            database_url=url, kek=LocalKek(TEST_KEK), reviewer_kek=LocalKek(TEST_REVIEWER_KEK)
        )
        service = await open_service(settings, pool_size=2)
        try:
            async with (
                running(service) as (_, port),
                httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as client,
            ):
                yield Served(
                    client,
                    await token_for(db, unique("rita")),
                    await token_for(db, unique("audit"), scope="auditor"),
                )
        finally:
            await service.close()


def answered_as(response: httpx.Response, kind: type[SignoffError]) -> bool:
    refusal = ERROR_TABLE[kind]
    return response.status_code == refusal.status and response.json()["error"] == refusal.code


async def test_an_unknown_call_is_404_in_its_story_reveal_and_resolution(served: Served) -> None:
    ref = {"run_id": unique("run"), "call_id": "c1"}
    story = await served.client.get("/v1/calls/story", params=ref, headers=served.auditor)
    assert answered_as(story, UnknownCall), story.text
    assert story.json()["message"] == f"no call c1 in run {ref['run_id']}"
    reveal = await served.client.post("/v1/calls/reveal", json=ref, headers=served.auditor)
    assert answered_as(reveal, UnknownCall), reveal.text
    resolve = await served.client.post(
        "/v1/calls/resolve", json={**ref, "status": "failed"}, headers=served.reviewer
    )
    assert answered_as(resolve, UnknownCall), resolve.text


async def test_a_position_the_digest_does_not_cover_is_404(served: Served) -> None:
    digest = await served.client.get("/v1/ledger/digest", headers=served.auditor)
    assert digest.status_code == 200, digest.text
    beyond = digest.json()["last_position"] + 10**9
    proof = await served.client.post(
        "/v1/ledger/proofs/inclusion",
        json={"position": beyond, "digest": digest.json()},
        headers=served.auditor,
    )
    assert answered_as(proof, NotInDigest), proof.text
