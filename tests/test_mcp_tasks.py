"""A long wait as an MCP task (`io.modelcontextprotocol/tasks`): its handle names rows in
PostgreSQL, so a gateway started after the one that made it answers `tasks/get`, runs the call
once it is approved (once, however often it is asked), and tells nobody else's principal a
thing."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any, Literal, cast

import mcp_types as types
import pytest
from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.shared.exceptions import MCPError
from pydantic import ConfigDict

from approvals import Decision

from .support.mcp_gateway import GatewaySite, approval_of, gateway_site, opens_links, url_of

TASKS = "io.modelcontextprotocol/tasks"
REFUND = {"order_id": "C-3", "amount": 7.0}


class TaskParams(types.RequestParams):
    task_id: str


class TaskRequest(types.Request[TaskParams, str]):
    name_param = "taskId"  # the Mcp-Name header over HTTP, as the extension asks


class TaskAnswer(types.Result):
    model_config = ConfigDict(extra="allow")


class CreatedTask(types.Result):
    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = "task"
    task_id: str
    status: str


class Tasks(ClientExtension):
    """The client's side of the extension: a `resultType: "task"` answer is a `CreatedTask`."""

    identifier = TASKS

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=self._unresolved)]

    async def _unresolved(self, created: CreatedTask, ctx: ClaimContext) -> types.CallToolResult:
        raise AssertionError("these tests poll tasks/get themselves (allow_claimed=True)")


@pytest.fixture
async def site(server_url: str, tmp_path: Path) -> AsyncIterator[GatewaySite]:
    async with gateway_site(server_url, tmp_path) as made:
        made.write_config(wait=0)
        yield made


def tasks_client(site: GatewaySite, *args: str, declares: bool = True) -> Client:
    extensions: list[ClientExtension] = [Tasks()] if declares else []
    return Client(
        site.stdio(*args),
        mode="2026-07-28",
        extensions=extensions,
        elicitation_callback=opens_links,
    )


async def task(client: Client, method: str, task_id: str) -> dict[str, Any]:
    answer = await client.session.send_request(
        TaskRequest(method=method, params=TaskParams(task_id=task_id)), TaskAnswer
    )
    return answer.model_dump(by_alias=True, exclude_none=True)


async def task_for_refund(client: Client) -> tuple[str, str]:
    """Ask for the refund, open the link, and get a task back: (task id, approval id)."""
    meta = cast(types.RequestParamsMeta, {"io.signoff/run": "t1"})
    asked = await client.session.call_tool("refund", REFUND, meta=meta, allow_input_required=True)
    assert isinstance(asked, types.InputRequiredResult)
    url = url_of(asked)
    made = await client.session.call_tool(
        "refund",
        REFUND,
        meta=meta,
        input_responses={"approval": types.ElicitResult(action="accept")},
        request_state=asked.request_state,
        allow_input_required=True,
        allow_claimed=True,
    )
    created = made.model_dump(by_alias=True, exclude_none=True)
    assert created["resultType"] == "task" and created["status"] == "working", created
    return created["taskId"], approval_of(url)


async def test_a_task_outlives_its_gateway_and_runs_the_approved_call_once(
    site: GatewaySite,
) -> None:
    async with tasks_client(site) as first:
        task_id, approval_id = await task_for_refund(first)
        working = await task(first, "tasks/get", task_id)
        assert working["status"] == "working" and approval_id in working["statusMessage"]
    assert site.executions("refund") == []  # that gateway is gone; nothing ran

    await site.reviewer.decide(approval_id, Decision.approve(), "cfo")
    async with tasks_client(site) as second, tasks_client(site) as third:
        done = await task(second, "tasks/get", task_id)
        again = await task(third, "tasks/get", task_id)
    assert done["status"] == "completed", done
    assert done["result"]["content"][0]["text"] == "refunded 7.00 EUR on C-3"
    assert again["result"] == done["result"]
    assert len(site.executions("refund")) == 1


async def test_a_task_is_nobody_else_s_and_not_the_agent_s_to_cancel(site: GatewaySite) -> None:
    async with tasks_client(site) as mine:
        task_id, approval_id = await task_for_refund(mine)
        with pytest.raises(MCPError) as cancel:
            await task(mine, "tasks/cancel", task_id)
        assert cancel.value.data["reason"] == "cancel_refused"
        with pytest.raises(MCPError) as forged:
            await task(mine, "tasks/get", task_id[:-4] + "AAAA")
        assert forged.value.data["reason"] == "unknown_task"
    await site.reviewer.decide(approval_id, Decision.approve(), "cfo")
    async with tasks_client(site, "--principal", "mallory") as mallory:
        with pytest.raises(MCPError) as foreign:
            await task(mallory, "tasks/get", task_id)
    assert foreign.value.data["reason"] == "unknown_task"
    async with tasks_client(site, declares=False) as plain:
        with pytest.raises(MCPError) as undeclared:
            await task(plain, "tasks/get", task_id)
    assert undeclared.value.code == types.MISSING_REQUIRED_CLIENT_CAPABILITY
    assert site.executions("refund") == []
