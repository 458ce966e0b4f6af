"""OIDC bearer tokens at the HTTP API, over real HTTP: keys made here, the JWKS a file or a
loopback URL, the service's login one that has only `signoff_reviewer`. API tokens keep
working beside them; a reviewer's groups are the directory's, never the token's."""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from adapters.http.server import running
from adapters.http.service import open_service
from approvals import ApiTokens, ApprovalStore, ReviewerDirectory
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.logins import temporary_login
from ledger.store.settings import OidcSettings, Settings

from .support.http import ask, bearer, every_pending, unique
from .support.ports import free_port
from .support.processes import ROOT, TEST_KEK, TEST_REVIEWER_KEK, kek_env
from .test_http_oidc import AUDIENCE, ISSUER, Signer, jwks

GUARD = 60  # seconds before a stuck step fails instead of hanging; nothing here is timed


@pytest.fixture(scope="module")
def signer() -> Signer:
    return Signer.rsa("api-rsa-1")


@pytest.fixture(scope="module")
def jwks_file(signer: Signer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("oidc") / "jwks.json"
    path.write_text(json.dumps(jwks(signer)))
    return path


def oidc_settings(jwks_source: str) -> OidcSettings:
    return OidcSettings(
        issuer=ISSUER,
        audiences=(AUDIENCE,),
        jwks=jwks_source,
        groups_claim="groups",
        auditor_group="auditors",
        agent_group="agents",
    )


@dataclass
class Api:
    client: httpx.AsyncClient
    port: int


async def serving(database_url: str, oidc: OidcSettings) -> AsyncIterator[Api]:
    async with temporary_login(database_url, "signoff_reviewer") as url:
        settings = Settings(
            database_url=url,
            kek=LocalKek(TEST_KEK),
            reviewer_kek=LocalKek(TEST_REVIEWER_KEK),
            oidc=oidc,
        )
        service = await open_service(settings, pool_size=3)
        try:
            async with (
                running(service) as (_, port),
                httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=GUARD) as client,
            ):
                yield Api(client, port)
        finally:
            await service.close()


@pytest.fixture(scope="module")
async def api(database_url: str, ring: KeyRing, jwks_file: Path) -> AsyncIterator[Api]:
    async for served in serving(database_url, oidc_settings(str(jwks_file))):
        yield served


async def listed(api: Api, headers: dict[str, str]) -> set[str]:
    return {a["approval_id"] for a in await every_pending(api.client, headers)}


async def approving(api: Api, approval_id: str, headers: dict[str, str]) -> int:
    """The status an approve by `headers`' caller gets."""
    response = await api.client.post(
        f"/v1/approvals/{approval_id}/decision",
        headers={**headers, "Idempotency-Key": uuid.uuid4().hex},
        json={"decision": "approve"},
    )
    return response.status_code


async def test_a_valid_jwt_lists_what_its_reviewer_may_decide(
    api: Api, signer: Signer, store: ApprovalStore
) -> None:
    who = unique("ada")
    approval_id = await ask(store, who)
    assert approval_id in await listed(api, bearer(signer.token(sub=who)))
    assert approval_id not in await listed(api, bearer(signer.token(sub=unique("eve"))))


async def test_expired_wrong_audience_wrong_issuer_and_foreign_keys_are_401(
    api: Api, signer: Signer
) -> None:
    now = int(time.time())
    for token in (
        signer.token(exp=now - 3600, iat=now - 7200),
        signer.token(aud="another-client"),
        signer.token(iss="https://idp.example.test/realms/other"),
        Signer.rsa(signer.kid).token(),  # the same kid, another key
        signer.token(sub=None),
    ):
        response = await api.client.get("/v1/approvals", headers=bearer(token))
        assert response.status_code == 401, response.text
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert response.json() == {"error": "unauthenticated", "message": "invalid token"}


async def test_api_tokens_still_work_beside_oidc(api: Api, db: Database) -> None:
    created = await ApiTokens(db).create(unique("bob"), by="admin")
    assert (await api.client.get("/v1/approvals", headers=bearer(created.token))).status_code == 200


async def test_policy_groups_come_from_the_directory_never_from_the_token(
    api: Api, signer: Signer, db: Database, store: ApprovalStore
) -> None:
    group, member, claimer = unique("leads"), unique("ann"), unique("mal")
    await ReviewerDirectory(db).add(member, [group], by="admin")
    approval_id = await ask(store, f"group:{group}")
    # In the directory's group, with no groups in the token: admitted.
    assert approval_id in await listed(api, bearer(signer.token(sub=member)))
    # The group in the token only: not admitted, to see or to decide.
    claiming = bearer(signer.token(sub=claimer, groups=[group]))
    assert approval_id not in await listed(api, claiming)
    shown = await api.client.get(f"/v1/approvals/{approval_id}", headers=claiming)
    assert shown.status_code == 403
    assert await approving(api, approval_id, claiming) == 403


async def test_the_auditor_group_reads_and_never_decides(
    api: Api, signer: Signer, store: ApprovalStore
) -> None:
    approval_id = await ask(store, unique("someone"))
    auditor = bearer(signer.token(sub=unique("aud"), groups=["auditors"]))
    shown = await api.client.get(f"/v1/approvals/{approval_id}", headers=auditor)
    assert shown.status_code == 200
    assert await approving(api, approval_id, auditor) == 403


async def test_the_agent_group_is_refused_as_an_invalid_token(
    api: Api, signer: Signer, store: ApprovalStore
) -> None:
    """An agent signs in to the MCP gateway, never here: not even as an auditor, nor where a
    policy names it."""
    who = unique("bot")
    approval_id = await ask(store, who)
    agent = bearer(signer.token(sub=who, groups=["agents", "auditors"]))
    shown = await api.client.get(f"/v1/approvals/{approval_id}", headers=agent)
    assert shown.status_code == 401, shown.text
    assert shown.json() == {"error": "unauthenticated", "message": "invalid token"}
    assert await approving(api, approval_id, agent) == 401
    assert (await store.get(approval_id)).status.value == "pending"


async def test_a_jwks_that_cannot_be_had_is_503_and_api_tokens_still_work(
    database_url: str, ring: KeyRing, signer: Signer, db: Database
) -> None:
    down = f"http://127.0.0.1:{free_port()}/certs"
    created = await ApiTokens(db).create(unique("bob"), by="admin")
    async for served in serving(database_url, oidc_settings(down)):
        response = await served.client.get("/v1/approvals", headers=bearer(signer.token()))
        assert response.status_code == 503, response.text
        assert response.json()["error"] == "unavailable" and "retry-after" in response.headers
        ok = await served.client.get("/v1/approvals", headers=bearer(created.token))
        assert ok.status_code == 200


async def test_serve_starts_with_oidc_and_no_api_token(
    fresh_database_url: str, signer: Signer, jwks_file: Path
) -> None:
    async with await Database.connect(fresh_database_url) as fresh:  # the owner makes the keys
        await KeyRing.open(fresh, LocalKek(TEST_KEK))
    env = {
        **kek_env(),
        "PYTHONPATH": str(ROOT),
        "SIGNOFF_DATABASE_URL": fresh_database_url,
        "SIGNOFF_OIDC_ISSUER": ISSUER,
        "SIGNOFF_OIDC_AUDIENCE": AUDIENCE,
        "SIGNOFF_OIDC_JWKS": str(jwks_file),
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "adapters.cli", "serve", "--port", "0", "--json",
        cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert process.stdout is not None
    try:
        line = await asyncio.wait_for(process.stdout.readline(), GUARD)
        assert line, "the service exited before it listened"
        started = json.loads(line)
        assert started["active_tokens"] == 0 and started["oidc_issuer"] == ISSUER
        async with httpx.AsyncClient(base_url=started["url"], timeout=GUARD) as client:
            ok = await client.get("/v1/approvals", headers=bearer(signer.token()))
            assert ok.status_code == 200, ok.text
            assert (await client.get("/v1/approvals")).status_code == 401
    finally:
        process.terminate()
        _, stderr = await process.communicate()
    assert f"OIDC tokens of {ISSUER}" in stderr.decode()
