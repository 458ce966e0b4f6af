"""The reviewer's side of `signoff demo`: the HTTP service of `signoff serve`, in this process on
a free loopback port and on the reviewer's login, and a short-lived API token for the demo's
reviewer, made by the owner and revoked at the end. The demo decides with an HTTP request as the
token's reviewer (`Review.approve`), or, with `--inbox`, waits for a person to decide with that
token (`Review.wait_for_person`).
"""

from __future__ import annotations

import dataclasses
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx

from adapters.http.server import running
from adapters.http.service import Service, open_service
from approvals import ApiTokens, Approval, CreatedToken
from ledger import SignoffError
from ledger.store import Database
from ledger.store.settings import Settings

__all__ = ["DECIDE_PATH", "Review", "ReviewFailed", "open_review"]

DECIDE_PATH = "/v1/approvals/{approval_id}/decision"
HTTP_TIMEOUT = 30.0


class ReviewFailed(SignoffError):
    """The service answered a request of the demo's with an error (the message says which)."""


@dataclass
class Review:
    """The running service, where it listens, its login and the reviewer's token."""

    service: Service
    port: int
    login: str
    token: CreatedToken

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def inbox_link(self) -> str:
        """The inbox's sign-in link: the token rides in the fragment, which no request sends."""
        return f"{self.url}/inbox#token={self.token.token}"

    @property
    def reviewer(self) -> str:
        return self.token.info.reviewer

    def _client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.url,
            headers={"Authorization": f"Bearer {self.token.token}"},
            timeout=HTTP_TIMEOUT,
        )

    async def pending(self, run_id: str) -> list[dict[str, Any]]:
        """`GET /v1/approvals?run_id=...`: what the token's reviewer may decide in the run."""
        async with self._client() as client:
            response = await client.get("/v1/approvals", params={"run_id": run_id})
        approvals: list[dict[str, Any]] = _answer(response)["approvals"]
        return approvals

    async def approve(self, approval_id: str, request_id: str) -> dict[str, Any]:
        """`POST /v1/approvals/{id}/decision` with an approval, idempotent by `request_id`."""
        async with self._client() as client:
            response = await client.post(
                DECIDE_PATH.format(approval_id=approval_id),
                json={"decision": "approve"},
                headers={"Idempotency-Key": request_id},
            )
        return _answer(response)

    async def wait_for_person(self, approval_id: str, seconds: float) -> Approval | None:
        """The approval once somebody decided it, or None when nobody did within `seconds`."""
        approval = await self.service.store.wait(approval_id, seconds)
        return approval if approval.status.final else None


def _answer(response: httpx.Response) -> dict[str, Any]:
    if response.is_error:
        try:
            problem = response.json()
            why = f"{problem['error']}: {problem['message']}"
        except (ValueError, KeyError, TypeError):
            why = response.text[:200]
        method, path = response.request.method, response.request.url.path
        raise ReviewFailed(f"{method} {path} answered {response.status_code} ({why})")
    document: dict[str, Any] = response.json()
    return document


async def open_review(
    stack: AsyncExitStack,
    owner: Database,
    settings: Settings,
    *,
    reviewer: str,
    lifetime: timedelta,
) -> Review:
    """Start the service with `settings` (the reviewer's login and both KEKs) on a free loopback
    port, and make a token for `reviewer` valid for `lifetime` on the `owner`'s login (an
    administrator's job). `stack` stops the service and revokes the token."""
    tokens = ApiTokens(owner)
    token = await tokens.create(reviewer, expires_in=lifetime, by="signoff-demo")
    stack.push_async_callback(_revoke, tokens, token.info.token_id)
    # Only the demo's token lets anyone in (no OIDC issuer of the environment's), and nothing
    # is announced to the environment's webhook, Slack or e-mail.
    quiet = dataclasses.replace(settings, oidc=None, webhook=None, slack=None, email=None)
    service = await open_service(quiet, pool_size=4)
    stack.push_async_callback(service.close)
    _, port = await stack.enter_async_context(running(service))
    async with service.db.connection() as conn:
        login: str = await conn.fetchval("SELECT session_user")
    return Review(service, port, login, token)


async def _revoke(tokens: ApiTokens, token_id: str) -> None:
    await tokens.revoke(token_id, by="signoff-demo")
