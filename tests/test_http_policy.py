"""`/v1/policy` on the HTTP service (a reviewer login): administrators publish, every
authenticated caller reads, an invalid set is refused with Cedar's diagnostics."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from tests.support.http import reviewer_service, token_for
from tests.support.policies import ADMIN, PolicyWorld, policy_world

SET = """
@id("small") permit(principal, action == Action::"refund", resource)
when { context.input.amount <= 50 };
"""


@pytest.fixture
async def world(server_url: str) -> AsyncIterator[PolicyWorld]:
    async with policy_world(server_url, prefix="signoff_http_policy") as w:
        yield w


@pytest.fixture
async def http(world: PolicyWorld) -> AsyncIterator[httpx.AsyncClient]:
    async with reviewer_service(world.url) as client:
        yield client


async def test_an_administrator_publishes_and_everyone_reads(
    world: PolicyWorld, http: httpx.AsyncClient
) -> None:
    admin = await token_for(world.db, ADMIN)
    auditor = await token_for(world.db, "audrey", scope="auditor")
    empty = await http.get("/v1/policy", headers=auditor)
    assert empty.status_code == 200 and empty.json()["version"] == 0

    published = await http.put("/v1/policy", json={"policies": SET}, headers=admin)
    assert published.status_code == 200, published.text
    assert published.json()["version"] == 1
    assert published.json()["published_by"] == ADMIN

    shown = await http.get("/v1/policy", headers=auditor)
    assert shown.json()["policy_ids"] == ["small"]
    assert shown.json()["policies"] == SET
    stale = await http.put("/v1/policy", json={"policies": SET, "expect_version": 0}, headers=admin)
    assert stale.status_code == 409
    missing = await http.get("/v1/policy", params={"version": 7}, headers=auditor)
    assert missing.status_code == 404


async def test_only_administrators_publish(world: PolicyWorld, http: httpx.AsyncClient) -> None:
    reviewer = await token_for(world.db, "alice")
    auditor = await token_for(world.db, "audrey", scope="auditor")
    by_reviewer = await http.put("/v1/policy", json={"policies": SET}, headers=reviewer)
    assert by_reviewer.status_code == 403 and "policy-admins" in by_reviewer.json()["message"]
    by_auditor = await http.put("/v1/policy", json={"policies": SET}, headers=auditor)
    assert by_auditor.status_code == 403
    anonymous = await http.put("/v1/policy", json={"policies": SET})
    assert anonymous.status_code == 401
    assert await world.sets.head() == 0


async def test_an_invalid_set_is_refused_and_nothing_changes(
    world: PolicyWorld, http: httpx.AsyncClient
) -> None:
    admin = await token_for(world.db, ADMIN)
    refused = await http.put(
        "/v1/policy",
        json={"policies": SET.replace("amount", "amout")},
        headers=admin,
    )
    assert refused.status_code == 422
    assert "small" in refused.json()["message"] and "amout" in refused.json()["message"]
    assert await world.sets.head() == 0
