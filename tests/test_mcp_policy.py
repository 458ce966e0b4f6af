"""The MCP gateway under a published Cedar set, driven by the MCP SDK's client in another
process: small refunds run without asking, larger ones wait for the approver the policy names,
the largest and unpermitted tools are refused and never reach the upstream."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from approvals import Decision, ReviewerDirectory
from approvals.checks import verify_all
from approvals.policies import ADMIN_GROUP, PolicySets, RegisteredTool
from ledger.calls import Effect
from ledger.errors import PermissionDenied
from ledger.store import Database
from tests.support.mcp_gateway import GatewaySite, approval_of, gateway_site

from .test_mcp_gateway import MODES, Reviewer

REFUNDS = """
@id("reads") permit(principal, action in Action::"effect:read", resource);

@id("small-refunds")
permit(principal, action == Action::"refund", resource)
when { context.input.amount.lessThanOrEqual(decimal("50.0")) };

@id("cfo-refunds") @approval("Refunds over 50 need the CFO") @approvers("cfo")
permit(principal, action == Action::"refund", resource)
when { context.input.amount.greaterThan(decimal("50.0")) };

@id("refund-cap") @reason("refunds above 500 are refused")
forbid(principal, action == Action::"refund", resource)
when { context.input.amount.greaterThan(decimal("500.0")) };
"""


@pytest.fixture
async def site(server_url: str, tmp_path: Path) -> AsyncIterator[GatewaySite]:
    async with gateway_site(server_url, tmp_path) as made:
        yield made


async def publish(site: GatewaySite) -> None:
    """Publish `REFUNDS` once the gateway registered its tools (it does when it starts)."""
    await ReviewerDirectory(site.owner).add("carol", [ADMIN_GROUP], by="owner")
    await PolicySets(site.owner, site.reviewer.ring).publish(REFUNDS, by="carol")


@pytest.mark.parametrize("mode", MODES)
async def test_the_policy_decides_each_call(site: GatewaySite, mode: str) -> None:
    reviewer = Reviewer(site, Decision.approve())
    async with Client(site.stdio(), mode=mode, elicitation_callback=reviewer) as client:
        await client.call_tool("balance", {"account": "A1"})  # before any set: as configured
        await publish(site)
        small = await client.call_tool("refund", {"order_id": "A-1", "amount": 12.5})
        assert reviewer.asked == []  # the tool's own rule asked the CFO; the set does not
        large = await client.call_tool("refund", {"order_id": "A-2", "amount": 80})
        with pytest.raises(MCPError) as capped:
            await client.call_tool("refund", {"order_id": "A-3", "amount": 900})
        with pytest.raises(MCPError) as unpermitted:
            await client.call_tool("tag_ticket", {"ticket": "T-1", "tag": "vip"})
        read = await client.call_tool("balance", {"account": "A1"})
    assert "A1" in read.content[0].text  # type: ignore[union-attr]
    assert small.content[0].text == "refunded 12.50 EUR on A-1"  # type: ignore[union-attr]
    assert large.content[0].text == "refunded 80.00 EUR on A-2"  # type: ignore[union-attr]
    [asked] = reviewer.asked
    approval = await site.reviewer.get(approval_of(asked.url))
    assert approval.policy.approvers == frozenset({"cfo"})
    assert approval.policy.description == "Refunds over 50 need the CFO"
    assert capped.value.data["reason"] == "policy_denied"
    assert "refunds above 500 are refused" in capped.value.message
    assert unpermitted.value.data["reason"] == "policy_denied"
    assert "no policy permits this call" in unpermitted.value.message
    ran = [e["args"]["order_id"] for e in site.executions("refund")]
    assert ran == ["A-1", "A-2"]
    assert site.executions("tag_ticket") == []
    report = await verify_all(site.owner)
    assert report.ok, report.problems


async def test_a_worker_login_cannot_publish(site: GatewaySite) -> None:
    """The gateway's own login (the worker role), even with the reviewer side's ring in hand,
    may not publish a set; nothing is written."""
    await ReviewerDirectory(site.owner).add("carol", [ADMIN_GROUP], by="owner")
    async with await Database.connect(site.login.url, settings=site.login.settings) as worker:
        sets = PolicySets(worker, site.reviewer.ring)
        await sets.register([RegisteredTool("balance", Effect.READ, {"type": "object"})])
        with pytest.raises(PermissionDenied):
            await sets.publish('@id("all") permit(principal, action, resource);', by="carol")
    assert await PolicySets(site.owner, site.reviewer.ring).head() == 0
