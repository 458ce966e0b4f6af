"""`GET /v1/approvals` beyond what waits: `status=` (pending by default, `decided`, `all` or
one status), newest decision first, filtered by run, tool and requester, in pages; a reviewer
sees the history only of approvals whose policy admits it, an auditor every one."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from approvals import ApprovalPolicy, ApprovalStore, InvalidApprovalRequest, ReviewerDirectory
from ledger.keys import KeyRing
from ledger.store import Database

from .support.http import token_for, unique
from .support.inbox import Served, served


@pytest.fixture(scope="module")
async def api(database_url: str, ring: KeyRing) -> AsyncIterator[Served]:
    async with served(database_url) as serving:
        yield serving


async def listed(api: Served, headers: dict[str, str], **params: Any) -> list[dict[str, Any]]:
    """Every page of `GET /v1/approvals` with `params`, two at a time."""
    found: list[dict[str, Any]] = []
    query = {"limit": 2, **params}
    while True:
        response = await api.client.get("/v1/approvals", params=query, headers=headers)
        assert response.status_code == 200, response.text
        page = response.json()
        found += page["approvals"]
        if page["next_cursor"] is None:
            return found
        query["cursor"] = page["next_cursor"]


async def decide(api: Served, headers: dict[str, str], approval_id: str, **body: Any) -> None:
    response = await api.client.post(
        f"/v1/approvals/{approval_id}/decision",
        json=body,
        headers={**headers, "Idempotency-Key": uuid.uuid4().hex},
    )
    assert response.status_code == 200, response.text


async def a_group(db: Database) -> tuple[ApprovalPolicy, dict[str, str]]:
    """A policy naming a group of its own, and a member's token."""
    group, member = unique("leads"), unique("ann")
    await ReviewerDirectory(db).add(member, [group], by="admin")
    return ApprovalPolicy(approvers=frozenset({f"group:{group}"})), await token_for(db, member)


async def test_history_lists_decided_approvals_newest_decision_first_by_status(
    api: Served, db: Database, store: ApprovalStore
) -> None:
    policy, member = await a_group(db)
    run_id = unique("history")
    made = [
        (
            await store.request(
                run_id=run_id,
                tool="refund",
                args={"i": i},
                call_id=f"c{i}",
                requested_by="agent",
                policy=policy,
            )
        ).approval_id
        for i in range(5)
    ]
    # Decided in another order than requested: the history follows the decisions.
    await decide(api, member, made[2], decision="approve")
    await decide(api, member, made[0], decision="reject", reason="wrong customer")
    await decide(api, member, made[3], decision="respond", message="ask again tomorrow")
    await store.cancel(made[4], by="ops")

    ids = [a["approval_id"] for a in await listed(api, member, run_id=run_id, status="decided")]
    assert ids == [made[4], made[3], made[0], made[2]]
    history = await listed(api, member, run_id=run_id, status="decided")
    assert [a["status"] for a in history] == ["cancelled", "responded", "rejected", "approved"]
    assert all(a["decided_at"] for a in history)
    assert history[2]["decided_by"] == history[3]["decided_by"] != []

    rejected = await listed(api, member, run_id=run_id, status="rejected")
    assert [a["approval_id"] for a in rejected] == [made[0]]
    pending = await listed(api, member, run_id=run_id)  # the default: what waits, as before
    assert [a["approval_id"] for a in pending] == [made[1]]
    assert [
        a["approval_id"] for a in await listed(api, member, run_id=run_id, status="pending")
    ] == [made[1]]
    everything = await listed(api, member, run_id=run_id, status="all")
    assert sorted(a["approval_id"] for a in everything) == sorted(made)
    assert everything[0]["approval_id"] == made[4]  # the newest event first

    bad = await api.client.get("/v1/approvals", params={"status": "done"}, headers=member)
    assert bad.status_code == 422 and "decided" in bad.json()["message"]


async def test_approvals_are_filtered_by_tool_and_requester_pending_and_decided(
    api: Served, db: Database, store: ApprovalStore
) -> None:
    policy, member = await a_group(db)
    run_id = unique("filters")
    asked = {
        (tool, who): (
            await store.request(
                run_id=run_id,
                tool=tool,
                args={},
                call_id=f"{tool}-{who}",
                requested_by=who,
                policy=policy,
            )
        ).approval_id
        for tool in ("refund", "email")
        for who in ("billing-agent", "support-agent")
    }
    await decide(api, member, asked["email", "billing-agent"], decision="approve")

    by_agent = await listed(api, member, run_id=run_id, requested_by="support-agent")
    assert {a["approval_id"] for a in by_agent} == {
        asked["refund", "support-agent"],
        asked["email", "support-agent"],
    }
    assert all(a["requested_by"] == "support-agent" for a in by_agent)
    one = await listed(api, member, run_id=run_id, tool="refund", requested_by="billing-agent")
    assert [a["approval_id"] for a in one] == [asked["refund", "billing-agent"]]
    decided = await listed(
        api, member, run_id=run_id, status="decided", tool="email", requested_by="billing-agent"
    )
    assert [a["approval_id"] for a in decided] == [asked["email", "billing-agent"]]
    assert await listed(api, member, run_id=run_id, status="decided", tool="refund") == []


async def test_a_reviewer_outside_a_policy_sees_no_history_of_it_and_an_auditor_sees_all(
    api: Served, db: Database, store: ApprovalStore
) -> None:
    policy, member = await a_group(db)
    outsider_name = unique("bob")
    await ReviewerDirectory(db).add(outsider_name, [unique("other")], by="admin")
    outsider = await token_for(db, outsider_name)
    unlisted = await token_for(db, unique("nobody"))  # in no directory: decides where named
    auditor = await token_for(db, unique("aud"), scope="auditor")
    run_id = unique("private")
    theirs = await store.request(
        run_id=run_id, tool="refund", args={}, call_id="c1", requested_by="agent", policy=policy
    )
    anyones = await store.request(
        run_id=run_id, tool="lookup", args={}, call_id="c2", requested_by="agent"
    )
    await decide(api, member, theirs.approval_id, decision="reject")
    await decide(api, member, anyones.approval_id, decision="approve")

    member_sees = await listed(api, member, run_id=run_id, status="decided")
    assert {a["approval_id"] for a in member_sees} == {theirs.approval_id, anyones.approval_id}
    for status in ("decided", "all", "rejected"):
        seen = await listed(api, outsider, run_id=run_id, status=status)
        assert theirs.approval_id not in {a["approval_id"] for a in seen}, status
    # A policy naming nobody admits the directory's reviewers, not a reviewer it does not list.
    assert [a["approval_id"] for a in await listed(api, outsider, run_id=run_id, status="all")] == [
        anyones.approval_id
    ]
    assert await listed(api, unlisted, run_id=run_id, status="all") == []
    audited = await listed(api, auditor, run_id=run_id, status="decided")
    assert [a["approval_id"] for a in audited] == [anyones.approval_id, theirs.approval_id]


async def test_a_history_of_no_status_or_an_unknown_one_is_refused(store: ApprovalStore) -> None:
    for statuses in ([], ["nope"]):
        with pytest.raises(InvalidApprovalRequest):
            await store.history_page(statuses)  # type: ignore[arg-type]


async def test_a_reviewer_the_directory_does_not_list_opens_no_approval_that_names_nobody(
    api: Served, db: Database, store: ApprovalStore
) -> None:
    listed_name = unique("lee")
    await ReviewerDirectory(db).add(listed_name, [unique("any")], by="admin")
    member = await token_for(db, listed_name)
    unlisted = await token_for(db, unique("nobody"))
    for policy in (ApprovalPolicy(any_reviewer=True), ApprovalPolicy()):
        approval = await store.request(
            run_id=unique("anyone"),
            tool="refund",
            args={"amount": 120},
            call_id="c1",
            requested_by="agent",
            policy=policy,
        )
        path = f"/v1/approvals/{approval.approval_id}"
        assert (await api.client.get(path, headers=member)).status_code == 200
        # As the listing and deciding judge it: the policy admits the directory's reviewers.
        one = await api.client.get(path, headers=unlisted)
        assert one.status_code == 403, one.text
        revealed = await api.client.post(f"{path}/reveal", headers=unlisted)
        assert revealed.status_code == 403, revealed.text
        assert "amount" not in revealed.text
