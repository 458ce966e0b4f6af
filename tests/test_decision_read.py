"""A decision is one read and one write: the read brings the approval, the reviewer's directory
groups, the server's clock and what this reviewer recorded before under the request id, so a
retry and a refusal are that read alone. Counted over real HTTP on the service's own pooled
connections by asyncpg's query loggers (after authentication), the service on a login that has
only `signoff_reviewer`; and a retry, in the library or racing itself over HTTP, records
nothing more.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from asyncpg.connection import LoggedQuery

from adapters.http.server import running
from adapters.http.service import Service, open_service
from approvals import (
    ApprovalAlreadyDecided,
    ApprovalPolicy,
    ApprovalStatus,
    ApprovalStore,
    Decision,
    ReviewerDirectory,
)
from approvals._sql import GROUPS_OF, TOKEN_USE
from ledger.journal import Journal
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.logins import temporary_login
from ledger.store.settings import Settings

from .support.http import token_for, unique
from .support.processes import TEST_KEK, TEST_REVIEWER_KEK

POOL = 3
# Authentication's statements (an API token's use, the reviewer's directory groups): not the
# decision's.
AUTHENTICATION = frozenset({TOKEN_USE, GROUPS_OF})


@dataclass(eq=False)  # hashed by identity: asyncpg keeps its loggers in a set
class Statements:
    """The statements the service's connections ran, in order, as asyncpg logged them."""

    texts: list[str] = field(default_factory=list)

    def __call__(self, record: LoggedQuery) -> None:
        self.texts.append(record.query)

    def after_authentication(self) -> list[str]:
        return [t for t in self.texts if t not in AUTHENTICATION]


@dataclass
class Decider:
    client: httpx.AsyncClient
    service: Service
    statements: Statements


@pytest.fixture(scope="module")
async def decider(database_url: str, ring: KeyRing) -> AsyncIterator[Decider]:
    async with temporary_login(database_url, "signoff_reviewer") as url:
        settings = Settings(
            database_url=url,
            kek=LocalKek(TEST_KEK),
            reviewer_kek=LocalKek(TEST_REVIEWER_KEK),
            # Nothing else on the pool while statements are counted: no tree integration, and
            # the key ring's cache not refreshed within a test.
            tree_integrate_seconds=0,
            key_refresh_seconds=3600,
        )
        service = await open_service(settings, pool_size=POOL)
        statements = Statements()
        # Every connection the pool will lend, each with the logger (kept across releases).
        held = [await service.db.pool.acquire() for _ in range(POOL)]
        for conn in held:
            conn.add_query_logger(statements)
        for conn in held:
            await service.db.pool.release(conn)
        try:
            async with (
                running(service) as (_, port),
                httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as client,
            ):
                yield Decider(client, service, statements)
        finally:
            await service.close()


async def an_approval(db: Database, store: ApprovalStore, *, quorum: int = 1) -> tuple[str, str]:
    """A pending refund for a group of its own with `quorum`; its id and a member's id."""
    group, member = unique("leads"), unique("ann")
    await ReviewerDirectory(db).add(member, [group], by="admin")
    approval = await store.request(
        run_id=unique("cost"),
        tool="refund",
        args={"amount": 120},
        call_id="c1",
        requested_by="support-agent",
        policy=ApprovalPolicy(approvers=frozenset({f"group:{group}"}), quorum=quorum),
    )
    return approval.approval_id, member


async def statements_of(
    decider: Decider, approval_id: str, headers: dict[str, str], body: dict[str, Any]
) -> tuple[httpx.Response, list[str]]:
    """The answer to one decide request, and the statements it ran after authentication."""
    decider.statements.texts.clear()
    response = await decider.client.post(
        f"/v1/approvals/{approval_id}/decision", headers=headers, json=body
    )
    return response, decider.statements.after_authentication()


async def test_a_decision_is_one_read_and_one_write_and_a_retry_or_refusal_one_read(
    decider: Decider, db: Database, store: ApprovalStore, journal: Journal
) -> None:
    # A first decision readies the service's key ring; the ones counted come after it.
    warm_id, warm_member = await an_approval(db, store)
    warm = await token_for(db, warm_member)
    first, _ = await statements_of(
        decider, warm_id, warm, {"decision": "approve", "request_id": "warm"}
    )
    assert first.status_code == 200, first.text

    approval_id, member = await an_approval(db, store, quorum=2)
    headers = await token_for(db, member)
    vote = {"decision": "approve", "request_id": "vote-1"}
    decided, ran = await statements_of(decider, approval_id, headers, vote)
    assert decided.status_code == 200, decided.text
    assert len(ran) == 2, ran

    replayed, ran = await statements_of(decider, approval_id, headers, vote)
    assert replayed.status_code == 200 and replayed.headers["idempotent-replayed"] == "true"
    assert len(ran) == 1, ran

    other_kind, ran = await statements_of(
        decider, approval_id, headers, {"decision": "reject", "request_id": "vote-1"}
    )
    assert other_kind.status_code == 409, other_kind.text
    assert len(ran) == 1, ran

    second_vote, ran = await statements_of(
        decider, approval_id, headers, {"decision": "approve", "request_id": "vote-2"}
    )
    assert second_vote.status_code == 409, second_vote.text  # one vote per reviewer
    assert len(ran) == 1, ran

    outsider = await token_for(db, unique("bob"))
    refused, ran = await statements_of(decider, approval_id, outsider, vote)
    assert refused.status_code == 403, refused.text
    assert len(ran) == 1, ran

    events = await journal.read_stream(f"approval:{approval_id}")
    assert [e.type for e in events] == ["approval.requested", "approval.decided"]


async def test_the_same_request_racing_itself_is_recorded_once_and_answered_alike(
    decider: Decider, db: Database, store: ApprovalStore, journal: Journal
) -> None:
    approval_id, member = await an_approval(db, store, quorum=2)
    headers = await token_for(db, member)
    url = f"/v1/approvals/{approval_id}/decision"
    body = {"decision": "approve", "request_id": "twin"}
    answers = await asyncio.gather(
        *(decider.client.post(url, headers=headers, json=body) for _ in range(2 * POOL))
    )
    assert [a.status_code for a in answers] == [200] * len(answers), [a.text for a in answers]
    replayed = [a.headers.get("idempotent-replayed") for a in answers]
    assert sorted(replayed, key=str) == [None] + ["true"] * (len(answers) - 1)
    assert {a.json()["status"] for a in answers} == {"pending"}  # one vote of two
    events = await journal.read_stream(f"approval:{approval_id}")
    assert [e.type for e in events] == ["approval.requested", "approval.decided"]


async def test_deciding_again_under_a_recorded_request_id_writes_nothing(
    db: Database, store: ApprovalStore, journal: Journal
) -> None:
    approval_id, member = await an_approval(db, store, quorum=2)
    first = await store.decide(approval_id, Decision.approve(), member, request_id="r-1")
    again = await store.decide(approval_id, Decision.approve(), member, request_id="r-1")
    assert again == first and again.status is ApprovalStatus.PENDING
    with pytest.raises(ApprovalAlreadyDecided, match="request id 'r-1' was a approve"):
        await store.decide(approval_id, Decision.reject("no"), member, request_id="r-1")
    decided = await store.decide_as_read(
        approval_id, lambda _: Decision.approve(), member, request_id="r-1"
    )
    assert decided.replayed and decided.approval == first
    events = await journal.read_stream(f"approval:{approval_id}")
    assert [e.type for e in events] == ["approval.requested", "approval.decided"]
