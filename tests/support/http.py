"""What the HTTP service's tests share: unique names, tokens, a pending approval."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from approvals import ApiTokens, ApprovalPolicy, ApprovalStore
from ledger.store import Database


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def token_for(db: Database, reviewer: str, scope: str = "reviewer") -> dict[str, str]:
    """The headers of a new API token for `reviewer`, made by the owner."""
    created = await ApiTokens(db).create(reviewer, scope=scope, by="admin")
    return bearer(created.token)


async def ask(store: ApprovalStore, *approvers: str) -> str:
    """A pending refund that `approvers` may decide; its id."""
    approval = await store.request(
        run_id=unique("http"),
        tool="refund",
        args={"amount": 120},
        call_id="c1",
        requested_by="support-agent",
        policy=ApprovalPolicy(approvers=frozenset(approvers)),
    )
    return approval.approval_id


async def every_pending(client: httpx.AsyncClient, headers: dict[str, str]) -> list[dict[str, Any]]:
    """Every pending approval `headers`' caller may decide, page after page: the suite's
    database holds the other tests' requests too, so its first page need not reach a new one."""
    approvals: list[dict[str, Any]] = []
    params = {"limit": "200"}
    while True:
        response = await client.get("/v1/approvals", headers=headers, params=params)
        assert response.status_code == 200, response.text
        page = response.json()
        approvals += page["approvals"]
        if page["next_cursor"] is None:
            return approvals
        params = {"limit": "200", "cursor": page["next_cursor"]}
