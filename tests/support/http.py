"""What the HTTP service's tests share: the service on a reviewer login, unique names, tokens,
a pending approval."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from adapters.http.limits import FailureLimit
from adapters.http.server import running
from adapters.http.service import open_service
from approvals import ApiTokens, ApprovalPolicy, ApprovalStore
from ledger.keys import LocalKek
from ledger.store import Database
from ledger.store.logins import temporary_login
from ledger.store.settings import Settings

from .processes import TEST_KEK, TEST_REVIEWER_KEK


@asynccontextmanager
async def reviewer_service(database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """`signoff serve` in this process on a login of `database_url` with only the reviewer
    role (and the session's KEKs): a client of it."""
    async with temporary_login(database_url, "signoff_reviewer") as url:
        settings = Settings(
            database_url=url, kek=LocalKek(TEST_KEK), reviewer_kek=LocalKek(TEST_REVIEWER_KEK)
        )
        service = await open_service(settings, pool_size=2, failure_limit=FailureLimit(1000))
        try:
            async with (
                running(service) as (_, port),
                httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as http,
            ):
                yield http
        finally:
            await service.close()


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
    return await ask_tool(store, "refund", ApprovalPolicy(approvers=frozenset(approvers)))


async def ask_tool(store: ApprovalStore, tool: str, policy: ApprovalPolicy) -> str:
    """A new pending request for `tool` under `policy` (a run of its own); its id."""
    approval = await store.request(
        run_id=unique("http"),
        tool=tool,
        args={"amount": 120},
        call_id="c1",
        requested_by="support-agent",
        policy=policy,
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
