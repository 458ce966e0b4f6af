"""The two tiers, tried as an attacker would: a token for a reviewer the directory does not list
deciding an `ApprovalPolicy()` approval over HTTP; an agent worker's login (only `signoff_app`,
no reviewer KEK) self-confirming a four-eyes approval, or self-confirming under a reviewer's name
or another login, through the database's own function; and `ledger verify` on a
self-confirmation of a four-eyes approval."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from approvals import (
    Approval,
    ApprovalPolicy,
    ApprovalStatus,
    ApprovalStore,
    Decision,
    DecisionKind,
    DecisionNotAllowed,
    ReviewerDirectory,
    SelfConfirmation,
)
from approvals.integrity import mac_events
from approvals.model import Review
from approvals.projection import APPROVALS, stream_of
from ledger.errors import EventNotPermitted, ReviewerKekMissing
from ledger.journal import Journal, NewEvent
from ledger.journal.projection import commit
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database

from .support.http import every_pending, reviewer_service, token_for, unique
from .support.processes import TEST_KEK, kek_env, run_cli
from .support.worker_login import WorkerLogin, worker_login

# -- over HTTP: a policy that names nobody admits only the directory's reviewers ---------------


@pytest.fixture(scope="module")
async def client(database_url: str, ring: KeyRing) -> AsyncIterator[httpx.AsyncClient]:
    async with reviewer_service(database_url) as http:
        yield http


async def asked(store: ApprovalStore, policy: ApprovalPolicy) -> Approval:
    return await store.request(
        run_id=unique("tiers"),
        tool="refund",
        args={"amount": 120},
        call_id="c1",
        requested_by="support-agent",
        policy=policy,
    )


def approve() -> dict[str, Any]:
    return {"decision": "approve", "request_id": uuid.uuid4().hex}


@pytest.mark.parametrize("policy", [ApprovalPolicy(), ApprovalPolicy(any_reviewer=True)])
async def test_a_token_for_a_reviewer_the_directory_does_not_list_decides_nothing(
    client: httpx.AsyncClient, db: Database, store: ApprovalStore, policy: ApprovalPolicy
) -> None:
    carol = await token_for(db, unique("carol"))  # in no group, not in the directory
    approval = await asked(store, policy)
    url = f"/v1/approvals/{approval.approval_id}/decision"

    pending = await every_pending(client, carol)
    assert approval.approval_id not in [a["approval_id"] for a in pending]
    refused = await client.post(url, headers=carol, json=approve())
    assert refused.status_code == 403, refused.text
    assert "directory" in refused.text
    after = await store.get(approval.approval_id)
    assert after.status is ApprovalStatus.PENDING and after.reviews == ()

    # A reviewer the directory lists decides it, signed.
    listed = unique("dana")
    await ReviewerDirectory(db).add(listed, by="admin")
    taken = await client.post(url, headers=await token_for(db, listed), json=approve())
    assert taken.status_code == 200, taken.text
    shown = taken.json()
    assert (shown["status"], shown["decided_by"]) == ("approved", [listed])
    assert shown["tier"] == str(policy.tier) and shown["self_confirmed"] is None
    assert shown["policy"]["tier"] == str(policy.tier)


# -- the database: a worker self-confirms only a self-confirm approval, as itself ----------------


@dataclass
class Worker:
    login: WorkerLogin
    db: Database
    store: ApprovalStore


@pytest.fixture(scope="module")
async def worker(server_url: str) -> AsyncIterator[Worker]:
    """A worker's login (only `signoff_app`) and its store, with no reviewer KEK."""
    async with (
        worker_login(server_url, LocalKek(TEST_KEK), prefix="signoff_tiers") as login,
        await Database.connect(login.url, settings=login.settings) as db,
    ):
        ring = await KeyRing.open(db)
        with pytest.raises(ReviewerKekMissing):
            ring.require_decision_signer()
        store = ApprovalStore(db, ring)
        try:
            yield Worker(login, db, store)
        finally:
            await store.close()


FOUR_EYES = ApprovalPolicy(approvers=frozenset({"cfo"}))


def forged(approval: Approval, name: str, confirmed: dict[str, Any], **extra: Any) -> NewEvent:
    """An `approval.decided` a worker writes itself: approved, final, by `name`."""
    review = Review(name, DecisionKind.APPROVE, datetime.now(UTC), self_confirmed=confirmed)
    data = review.to_json() | {"final": True, "decided_by": [name]} | extra
    return NewEvent("approval.decided", data, actor=name)


async def append_raw(worker: Worker, approval: Approval, event: NewEvent) -> Approval | None:
    """What `signoff_commit_approval` makes of `event` appended to `approval` by the worker's
    login, with its MAC (a worker holds the MAC key): the function called with the row the
    event folds to, as any SQL of the worker's own could call it."""
    stream = stream_of(approval.approval_id)
    [maced] = mac_events(worker.store.ring, approval.binding, stream, approval.version, [event])
    async with worker.db.connection() as conn, worker.store.ring.sealing():
        return await commit(conn, APPROVALS, stream, approval, [maced], expected_version=1)


# A grant object too: the shape the database let a worker's decision through with before.
GRANT = {"grant": {"grant_id": "g-1", "granted_by": "cfo"}}


@pytest.mark.parametrize("extra", [{}, GRANT], ids=["plain", "with-a-grant-object"])
async def test_a_worker_cannot_self_confirm_a_four_eyes_approval(
    worker: Worker, extra: dict[str, Any]
) -> None:
    approval = await asked(worker.store, FOUR_EYES)
    me = SelfConfirmation(worker.login.name, "host", 1)
    with pytest.raises(DecisionNotAllowed, match="four-eyes"):
        await worker.store.self_confirm(approval.approval_id, Decision.approve())
    with pytest.raises(EventNotPermitted):
        await append_raw(worker, approval, forged(approval, me.name, me.to_json(), **extra))
    assert (await worker.store.get(approval.approval_id)).status is ApprovalStatus.PENDING


@pytest.mark.parametrize("extra", [{}, GRANT], ids=["plain", "with-a-grant-object"])
async def test_a_self_confirmation_names_the_session_s_own_login_and_no_reviewer(
    worker: Worker, extra: dict[str, Any]
) -> None:
    approval = await asked(worker.store, ApprovalPolicy())
    me = SelfConfirmation(worker.login.name, "host", 1)
    other = SelfConfirmation("signoff_reviewer_login", "host", 1)
    attempts = {
        "a reviewer's name": forged(approval, "cfo", me.to_json(), **extra),
        "another login": forged(approval, other.name, other.to_json(), **extra),
        "another login in its data only": forged(approval, me.name, other.to_json(), **extra),
        "decided by a reviewer": forged(approval, me.name, me.to_json(), decided_by=["cfo"]),
    }
    for what, event in attempts.items():
        with pytest.raises(EventNotPermitted):
            await append_raw(worker, approval, event)
            pytest.fail(f"{what}: taken")
    assert (await worker.store.get(approval.approval_id)).status is ApprovalStatus.PENDING

    # As itself, on a self-confirm approval: taken, and it proves itself.
    confirmed = await worker.store.self_confirm(approval.approval_id, Decision.approve())
    assert confirmed.status is ApprovalStatus.APPROVED
    assert confirmed.decided_by == (me.name,)
    who = confirmed.self_confirmed
    assert who is not None and who.login == worker.login.name
    assert await worker.store.problems(approval.approval_id) == []
    consumed = await worker.store.consume(approval.approval_id, "run/c1")
    assert consumed.decision == Decision.approve()


async def test_verify_reports_a_self_confirmation_of_a_four_eyes_approval(
    worker: Worker,
) -> None:
    """Planted by the owner, whom the database's checks leave alone only outside the function
    (a plain append to the stream): `ledger verify` still finds it, and exits 1."""
    approval = await asked(worker.store, FOUR_EYES)
    me = SelfConfirmation(worker.login.name, "host", 1)
    event = forged(approval, me.name, me.to_json())
    stream = stream_of(approval.approval_id)
    [maced] = mac_events(worker.store.ring, approval.binding, stream, 1, [event])
    problems = await worker.store.problems(approval.approval_id)
    assert problems == []
    async with await Database.connect(worker.login.owner_url) as owner:
        await Journal(owner).append(stream, [maced], expected_version=1)
    [problem] = await worker.store.problems(approval.approval_id)
    assert problem.kind == "policy" and "four-eyes" in problem.message

    verified = await run_cli(
        "ledger", "verify", "--json", database_url=worker.login.owner_url, env=kek_env()
    )
    assert verified.code == 1, verified.stderr
    assert "four-eyes" in json.dumps(json.loads(verified.stdout))


async def test_the_worker_login_holds_no_reviewer_role(worker: Worker) -> None:
    async with worker.db.connection() as conn:
        roles = await conn.fetch(
            "SELECT r.rolname FROM pg_roles r WHERE pg_has_role(session_user, r.oid, 'MEMBER')"
            " AND r.rolname LIKE 'signoff%' AND r.rolname <> session_user"
        )
    assert [r["rolname"] for r in roles] == ["signoff_app"]
