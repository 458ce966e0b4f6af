"""`signoff mcp` as MCP clients meet it: the real client in this process, the gateway in its
own (a login with only `signoff_app`, no reviewer KEK), the upstream in a third, both protocol
revisions. A reviewer decides on the same database as the inbox would (signed)."""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import mcp_types as types
import pytest
from mcp import Client
from mcp.client.context import ClientRequestContext
from mcp.shared.exceptions import MCPError

from approvals import ApprovalStatus, Decision
from ledger.keys import Purpose
from ledger.store.history import record_loss, settle_loss

from .support.mcp_gateway import GatewaySite, approval_of, gateway_site, opens_links, url_of
from .support.until import until

MODERN = "2026-07-28"
MODES = [MODERN, "legacy"]
REFUND = {"order_id": "A-1", "amount": 12.5}


def run_meta(run: str) -> types.RequestParamsMeta:
    return cast(types.RequestParamsMeta, {"io.signoff/run": run})


@pytest.fixture
async def site(server_url: str, tmp_path: Path) -> AsyncIterator[GatewaySite]:
    async with gateway_site(server_url, tmp_path) as made:
        yield made


class Reviewer:
    """The person who opens the inbox link: decides as `who` with `decision`, then says
    accept (URL mode only means the link was opened)."""

    def __init__(self, site: GatewaySite, decision: Decision, who: str = "cfo") -> None:
        self.site, self.decision, self.who = site, decision, who
        self.asked: list[types.ElicitRequestURLParams] = []

    async def __call__(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        assert isinstance(params, types.ElicitRequestURLParams), params
        self.asked.append(params)
        await self.site.reviewer.decide(approval_of(params.url), self.decision, self.who)
        return types.ElicitResult(action="accept")


@pytest.mark.parametrize("mode", MODES)
async def test_reads_run_every_time_and_a_finished_write_replays(
    site: GatewaySite, mode: str
) -> None:
    site.write_config()
    async with Client(site.stdio(), mode=mode) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert set(listed) == {"balance", "tag_ticket", "refund"}
        for _ in range(2):
            read = await client.call_tool("balance", {"account": "A1"})
            assert "A1" in read.content[0].text  # type: ignore[union-attr]
    assert len(site.executions("balance")) == 2


@pytest.mark.parametrize("mode", MODES)
async def test_a_four_eyes_call_opens_the_inbox_and_runs_once_when_approved(
    site: GatewaySite, mode: str
) -> None:
    reviewer = Reviewer(site, Decision.approve())
    async with Client(site.stdio(), mode=mode, elicitation_callback=reviewer) as client:
        done = await client.call_tool("refund", REFUND)
        again = await client.call_tool("refund", REFUND)
    assert done.content[0].text == "refunded 12.50 EUR on A-1"  # type: ignore[union-attr]
    assert again == done
    [asked] = reviewer.asked  # the replay asks nobody
    assert asked.url.startswith("http://inbox.test/inbox/approvals/apr-")
    assert (asked.elicitation_id is None) == (mode != "legacy")
    assert len(site.executions("refund")) == 1
    approval = await site.reviewer.get(approval_of(asked.url))
    assert approval.status is ApprovalStatus.APPROVED and approval.consumed_by is not None
    # The request, the consumption and the call were written by the worker's login alone.
    async with site.owner.connection() as conn:
        logins = await conn.fetch(
            "SELECT DISTINCT login, type FROM events WHERE stream_id IN ($1, $2)",
            f"call:{approval.consumed_by}",
            f"approval:{approval.approval_id}",
        )
    by_type = {row["type"]: row["login"] for row in logins}
    assert by_type["call.succeeded"] == by_type["approval.requested"] == site.login.name
    assert by_type["approval.decided"] != site.login.name
    assert approval.requested_by == os.environ.get("USER", approval.requested_by)


@pytest.mark.parametrize("mode", MODES)
async def test_a_rejected_call_is_refused_and_nothing_runs(site: GatewaySite, mode: str) -> None:
    reviewer = Reviewer(site, Decision.reject("not this order"))
    async with Client(site.stdio(), mode=mode, elicitation_callback=reviewer) as client:
        with pytest.raises(MCPError) as refused:
            await client.call_tool("refund", REFUND)
    assert refused.value.data["reason"] == "approval_rejected"
    assert "not this order" in refused.value.message
    assert site.executions("refund") == []


@pytest.mark.parametrize("mode", MODES)
async def test_a_self_confirmation_runs_the_edited_call(site: GatewaySite, mode: str) -> None:
    forms: list[dict[str, Any]] = []

    async def person(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        assert isinstance(params, types.ElicitRequestFormParams)
        forms.append(params.requested_schema)
        return types.ElicitResult(action="accept", content={"approve": True, "tag": "urgent"})

    async with Client(site.stdio(), mode=mode, elicitation_callback=person) as client:
        done = await client.call_tool("tag_ticket", {"ticket": "T-7", "tag": "later"})
    assert "urgent" in done.content[0].text  # type: ignore[union-attr]
    assert forms[0]["properties"]["tag"]["default"] == "later"
    assert [e["args"] for e in site.executions("tag_ticket")] == [
        {"ticket": "T-7", "tag": "urgent"}
    ]


async def first_round(client: Client, args: dict[str, Any], run: str) -> types.InputRequiredResult:
    answer = await client.session.call_tool(
        "refund", args, meta=run_meta(run), allow_input_required=True
    )
    assert isinstance(answer, types.InputRequiredResult)
    return answer


async def retry(
    client: Client, args: dict[str, Any], run: str, state: str | None
) -> types.CallToolResult | types.InputRequiredResult:
    return await client.session.call_tool(
        "refund",
        args,
        meta=run_meta(run),
        input_responses={"approval": types.ElicitResult(action="accept")},
        request_state=state,
        allow_input_required=True,
    )


async def test_a_decision_waited_on_through_one_gateway_is_used_through_another(
    site: GatewaySite,
) -> None:
    site.write_config(wait=0)
    async with (
        Client(site.stdio(), mode=MODERN, elicitation_callback=opens_links) as a,
        Client(site.stdio(), mode=MODERN, elicitation_callback=opens_links) as b,
        Client(
            site.stdio("--principal", "mallory"), mode=MODERN, elicitation_callback=opens_links
        ) as mallory,
    ):
        asked = await first_round(a, REFUND, "conv-1")
        pending = await retry(a, REFUND, "conv-1", asked.request_state)  # nobody decided yet
        assert isinstance(pending, types.InputRequiredResult) and pending.request_state
        await site.reviewer.decide(approval_of(url_of(asked)), Decision.approve(), "cfo")

        refused: dict[str, MCPError] = {}
        for name, client, args in [
            ("changed arguments", b, {**REFUND, "amount": 9999}),
            ("another principal", mallory, REFUND),
        ]:
            with pytest.raises(MCPError) as caught:
                await retry(client, args, "conv-1", pending.request_state)
            refused[name] = caught.value
        assert {e.message for e in refused.values()} == {"Invalid or expired requestState"}
        assert site.executions("refund") == []

        done = await retry(b, REFUND, "conv-1", pending.request_state)
        assert isinstance(done, types.CallToolResult) and not done.is_error
        with pytest.raises(MCPError) as replayed:
            await retry(a, REFUND, "conv-1", pending.request_state)
        assert replayed.value.data["reason"] == "request_state_used"
    assert len(site.executions("refund")) == 1


async def test_an_expired_approval_is_refused_and_nothing_runs(site: GatewaySite) -> None:
    site.write_config(wait=0, expires="1")
    async with Client(site.stdio(), mode=MODERN, elicitation_callback=opens_links) as client:
        asked = await first_round(client, REFUND, "conv-2")
        approval = await site.reviewer.get(approval_of(url_of(asked)))
        expires_at = approval.expires_at
        assert expires_at is not None
        await until(lambda: datetime.now(UTC) > expires_at, 30, "the approval's expiry")
        with pytest.raises(MCPError) as refused:
            await retry(client, REFUND, "conv-2", asked.request_state)
    assert refused.value.data["reason"] == "approval_expired"
    assert site.executions("refund") == []


async def test_a_gateway_killed_during_a_single_attempt_call_leaves_outcome_unknown(
    site: GatewaySite, tmp_path: Path
) -> None:
    site.write_config(hold=True)
    reviewer = Reviewer(site, Decision.approve())
    meta = run_meta("conv-3")
    client = Client(
        site.stdio("--lease-seconds", "2"), mode="2026-07-28", elicitation_callback=reviewer
    )
    async with client:
        import anyio

        async with anyio.create_task_group() as tasks:

            async def call() -> None:
                with pytest.raises(MCPError):  # the gateway dies under it
                    await client.call_tool("refund", REFUND, meta=meta)

            tasks.start_soon(call)
            await until(lambda: len(site.executions("refund")) == 1, 60, "the refund started")
            os.kill(site.executions("refund")[0]["ppid"], signal.SIGKILL)
    site.hold.touch()  # the orphaned upstream may finish; it ran once whatever it does
    async with Client(site.stdio("--lease-seconds", "2"), mode="2026-07-28") as again:
        with pytest.raises(MCPError) as unknown:
            await again.call_tool("refund", REFUND, meta=meta)
    assert unknown.value.data["reason"] == "outcome_unknown"
    assert len(site.executions("refund")) == 1


async def test_a_run_id_cannot_name_another_principal_s_run(site: GatewaySite) -> None:
    # Principal "mallory" with run "x:y" would be run "mcp:mallory:x:y", principal "mallory:x"'s.
    async with Client(site.stdio("--principal", "mallory"), mode="2026-07-28") as client:
        with pytest.raises(MCPError) as refused:
            await client.call_tool("balance", {"account": "A1"}, meta=run_meta("x:y"))
    assert refused.value.data["reason"] == "invalid_meta"
    assert site.executions() == []


@pytest.mark.parametrize("mode", MODES)
async def test_a_client_that_declares_no_elicitation_is_told_where_the_approval_waits(
    site: GatewaySite, mode: str
) -> None:
    async with Client(site.stdio(), mode=mode) as client:  # no callback: no elicitation
        with pytest.raises(MCPError) as refused:
            await client.call_tool("refund", REFUND)
    assert refused.value.data["reason"] == "elicitation_unsupported"
    approval_id = refused.value.data["approval_id"]
    assert f"/inbox/approvals/{approval_id}" in refused.value.message
    assert (await site.reviewer.get(approval_id)).status is ApprovalStatus.PENDING
    assert site.executions() == []


async def test_a_state_sealed_under_a_key_made_since_opens_in_a_gateway_that_never_saw_it(
    site: GatewaySite,
) -> None:
    site.write_config(wait=0)
    # B has cached the key ring and would not look again for an hour on its own.
    b = Client(
        site.stdio(env={"SIGNOFF_KEY_REFRESH_SECONDS": "3600"}),
        mode=MODERN,
        elicitation_callback=opens_links,
    )
    async with b:
        await b.call_tool("balance", {"account": "K1"})
        await site.reviewer.ring.rotate(Purpose.RESULT)  # another process rotates the key
        async with Client(site.stdio(), mode=MODERN, elicitation_callback=opens_links) as a:
            asked = await first_round(a, REFUND, "conv-k")  # sealed under the new key
        await site.reviewer.decide(approval_of(url_of(asked)), Decision.approve(), "cfo")
        done = await retry(b, REFUND, "conv-k", asked.request_state)
    assert isinstance(done, types.CallToolResult) and not done.is_error
    assert len(site.executions("refund")) == 1


async def test_an_answer_sent_before_being_asked_is_asked_for_again(site: GatewaySite) -> None:
    async with Client(site.stdio(), mode=MODERN, elicitation_callback=opens_links) as client:
        first = await retry(client, REFUND, "conv-early", None)  # an "accept" nobody asked for
    assert isinstance(first, types.InputRequiredResult)
    assert url_of(first).startswith("http://inbox.test/inbox/approvals/")
    assert site.executions() == []


async def test_a_call_while_a_loss_of_history_is_open_is_refused_and_nothing_runs(
    site: GatewaySite,
) -> None:
    """The gateway's calls are the database's to refuse while committed history is lost and
    not settled (`signoff db history`): the client is told why, the upstream never called."""
    site.write_config()
    await record_loss(site.owner, "a failover lost commits")
    async with Client(site.stdio(), mode=MODERN) as client:
        with pytest.raises(MCPError) as refused:
            await client.call_tool("balance", {"account": "A1"})
        assert refused.value.data["reason"] == "history_lost"
        assert "signoff db history" in refused.value.message
        await settle_loss(site.owner, "nothing was lost after all")
        read = await client.call_tool("balance", {"account": "A1"})
    assert "A1" in read.content[0].text  # type: ignore[union-attr]
    assert len(site.executions("balance")) == 1
