"""`signoff mcp --http`: clients authenticate with an agent token (the principal is the token's
name, never what the client says), anything else is a 401; and two gateway processes behind one
database, a decision made through the inbox's API while the client waited on one is used by a
retry through the other."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import cast

import httpx
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from .support.http import bearer, reviewer_service, token_for, unique
from .support.mcp_gateway import GatewaySite, approval_of, gateway_site, opens_links, url_of
from .test_http_oidc import AUDIENCE, ISSUER, Signer, jwks

REFUND = {"order_id": "B-2", "amount": 40.0}


@pytest.fixture
async def site(server_url: str, tmp_path: Path) -> AsyncIterator[GatewaySite]:
    async with gateway_site(server_url, tmp_path) as made:
        made.write_config(wait=0)
        yield made


@pytest.fixture
async def gateways(site: GatewaySite) -> AsyncIterator[list[str]]:
    started = [await site.serve_http() for _ in range(2)]
    try:
        yield [url for url, _ in started]
    finally:
        for _, process in started:
            process.kill()
            await process.wait()


@pytest.fixture
async def inbox(site: GatewaySite) -> AsyncIterator[httpx.AsyncClient]:
    """`signoff serve` on the same database: the reviewers' door."""
    async with reviewer_service(site.login.owner_url) as http:
        yield http


def client(url: str, headers: dict[str, str], mode: str, *, asks: bool = True) -> Client:
    """A client of the gateway at `url`; `asks`: it declares elicitation (its user opens
    links), else a call that needs approval is refused as soon as the approval is requested."""
    http = create_mcp_http_client(headers=headers)
    transport = streamable_http_client(url, http_client=http)
    return Client(transport, mode=mode, elicitation_callback=opens_links if asks else None)


def run_meta(run: str) -> types.RequestParamsMeta:
    return cast(types.RequestParamsMeta, {"io.signoff/run": run})


@pytest.mark.parametrize("mode", ["2026-07-28", "legacy"])
async def test_an_agent_token_names_the_caller(
    site: GatewaySite, gateways: list[str], mode: str
) -> None:
    agent = unique("agent")
    headers = await token_for(site.owner, agent, scope="agent")
    async with client(gateways[0], headers, mode, asks=False) as mcp:
        read = await mcp.call_tool("balance", {"account": "B2"})
        # The client's `_meta` names its conversation, never who it is.
        meta = cast(types.RequestParamsMeta, {"io.signoff/run": "c1", "principal": "cfo"})
        with pytest.raises(MCPError):  # it cannot be asked: the approval waits
            await mcp.call_tool("refund", REFUND, meta=meta)
    assert "B2" in read.content[0].text  # type: ignore[union-attr]
    [approval] = await site.reviewer.pending()
    assert approval.requested_by == agent and approval.run_id == f"mcp:{agent}:c1"
    assert site.executions("refund") == []


@pytest.mark.parametrize("who", ["none", "reviewer", "auditor", "forged"])
async def test_anything_but_an_agent_token_is_a_401(
    site: GatewaySite, gateways: list[str], who: str
) -> None:
    headers = {} if who in ("none", "forged") else await token_for(site.owner, unique(who), who)
    if who == "forged":
        headers = bearer("sgf_abcdefgh12345678_" + "x" * 43)
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    async with httpx.AsyncClient(timeout=30) as http:
        answer = await http.post(
            gateways[0],
            json=body,
            headers={**headers, "Accept": "application/json, text/event-stream"},
        )
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"].startswith("Bearer")
    assert site.executions() == []


async def test_an_inbox_decision_waited_on_through_one_gateway_is_used_through_another(
    site: GatewaySite, gateways: list[str], inbox: httpx.AsyncClient
) -> None:
    headers = await token_for(site.owner, unique("agent"), scope="agent")
    cfo = await token_for(site.owner, "cfo")
    async with (
        client(gateways[0], headers, "2026-07-28") as a,
        client(gateways[1], headers, "2026-07-28") as b,
    ):
        asked = await a.session.call_tool(
            "refund", REFUND, meta=run_meta("c2"), allow_input_required=True
        )
        assert isinstance(asked, types.InputRequiredResult)
        approval_id = approval_of(url_of(asked))
        decided = await inbox.post(
            f"/v1/approvals/{approval_id}/decision",
            headers=cfo,
            json={"decision": "approve", "request_id": unique("r")},
        )
        assert decided.status_code == 200, decided.text
        done = await b.session.call_tool(
            "refund",
            REFUND,
            meta=run_meta("c2"),
            input_responses={"approval": types.ElicitResult(action="accept")},
            request_state=asked.request_state,
            allow_input_required=True,
        )
    assert isinstance(done, types.CallToolResult) and not done.is_error
    [ran] = site.executions("refund")
    assert ran["args"] == {**REFUND, "note": ""}


async def test_an_oidc_token_of_the_agent_group_names_the_caller(
    site: GatewaySite, tmp_path: Path
) -> None:
    signer = Signer.rsa("gateway-rsa-1")
    keys = tmp_path / "jwks.json"
    keys.write_text(json.dumps(jwks(signer)), encoding="utf-8")
    url, process = await site.serve_http(
        {
            "SIGNOFF_OIDC_ISSUER": ISSUER,
            "SIGNOFF_OIDC_AUDIENCE": AUDIENCE,
            "SIGNOFF_OIDC_JWKS": str(keys),
            "SIGNOFF_OIDC_GROUPS_CLAIM": "groups",
            "SIGNOFF_OIDC_AGENT_GROUP": "agents",
        }
    )
    try:
        robot = bearer(signer.token(sub="robot-1", groups=["agents"]))
        async with client(url, robot, "2026-07-28", asks=False) as mcp:
            with pytest.raises(MCPError):  # it cannot be asked: the approval waits
                await mcp.call_tool("refund", REFUND, meta=run_meta("o1"))
        [approval] = await site.reviewer.pending()
        assert approval.requested_by == "robot-1" and approval.run_id == "mcp:robot-1:o1"
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        accept = {"Accept": "application/json, text/event-stream"}
        async with httpx.AsyncClient(timeout=30) as http:
            for person in (["finance"], ["auditors"]):
                token = bearer(signer.token(sub="ada", groups=person))
                refused = await http.post(url, json=body, headers={**token, **accept})
                assert refused.status_code == 401
    finally:
        process.kill()
        await process.wait()
    assert site.executions() == []
