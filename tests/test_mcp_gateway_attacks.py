"""`signoff mcp` as an attacker meets it: a client that picks its own `_meta`, a client that
declared no elicitation, an agent that shapes arguments to hide part of them from the person
confirming. The gateway runs in its own process over stdio (a worker login), the upstream in a
third, as in `test_mcp_gateway`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import mcp_types as types
import pytest
from mcp import Client
from mcp.client.context import ClientRequestContext
from mcp.shared.exceptions import MCPError

from approvals import Decision

from .support.mcp_gateway import GatewaySite, approval_of, gateway_site, opens_links
from .support.mcp_hostile_upstream import MODULE as HOSTILE
from .support.mcp_upstream import MODULE as UPSTREAM_MODULE
from .support.processes import ROOT
from .support.until import until

REFUND = {"order_id": "A-1", "amount": 12.5}


@pytest.fixture
async def site(server_url: str, tmp_path: Path) -> AsyncIterator[GatewaySite]:
    async with gateway_site(server_url, tmp_path) as made:
        yield made


def run_meta(run: str) -> types.RequestParamsMeta:
    return cast(types.RequestParamsMeta, {"io.signoff/run": run})


async def test_a_principal_cannot_name_the_run_of_one_whose_name_extends_its_own(
    site: GatewaySite,
) -> None:
    """`ann` with conversation `ops:c1` must not be `ann:ops` with `c1`: same run id, so the
    finished refund of `ann:ops` would replay to `ann` without anyone being asked."""

    async def cfo(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        assert isinstance(params, types.ElicitRequestURLParams)
        await site.reviewer.decide(approval_of(params.url), Decision.approve(), "cfo")
        return types.ElicitResult(action="accept")

    async with Client(
        site.stdio("--principal", "ann:ops"), mode="2026-07-28", elicitation_callback=cfo
    ) as victim:
        done = await victim.call_tool("refund", REFUND, meta=run_meta("c1"))
    assert not done.is_error

    asked: list[types.ElicitRequestParams] = []

    async def declines(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        asked.append(params)
        return types.ElicitResult(action="decline")

    got: types.CallToolResult | None = None
    async with Client(
        site.stdio("--principal", "ann"), mode="2026-07-28", elicitation_callback=declines
    ) as attacker:
        with contextlib.suppress(MCPError):  # refused: what the fix does
            got = await attacker.call_tool("refund", REFUND, meta=run_meta("ops:c1"))
    assert got is None or got.content != done.content, "ann read the result of ann:ops's call"
    assert len(site.executions("refund")) == 1


def _rpc(id_: int, method: str, params: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": id_, "method": method, "params": params}).encode()


async def _answer_to(
    process: asyncio.subprocess.Process, id_: int, seen: list[dict[str, Any]]
) -> dict[str, Any]:
    """Read the gateway's messages until the answer to `id_`; any request it sends meanwhile is
    kept in `seen` and refused (as a client without the capability would)."""
    assert process.stdout is not None and process.stdin is not None
    while True:
        line = await asyncio.wait_for(process.stdout.readline(), 60)
        assert line, "the gateway closed its stdout"
        message = json.loads(line)
        if message.get("id") == id_ and "method" not in message:
            return cast(dict[str, Any], message)
        if "method" in message and "id" in message:
            seen.append(message)
            refusal = {
                "jsonrpc": "2.0",
                "id": message["id"],
                "error": {"code": -32601, "message": "Method not found"},
            }
            process.stdin.write(json.dumps(refusal).encode() + b"\n")
            await process.stdin.drain()


@pytest.mark.parametrize(
    "capabilities", [{}, {"elicitation": {}}], ids=["no elicitation", "form only"]
)
async def test_a_2025_client_is_not_sent_an_elicitation_mode_it_did_not_declare(
    site: GatewaySite, capabilities: dict[str, Any]
) -> None:
    """A four-eyes call asks by URL mode: a client that declared none (or form mode only) must
    get a clear error naming the approval, and no `elicitation/create` it cannot handle."""
    params = site.stdio()
    process = await asyncio.create_subprocess_exec(
        params.command,
        *params.args,
        env=params.env,
        cwd=params.cwd,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert process.stdin is not None
    seen: list[dict[str, Any]] = []
    try:
        hello = {
            "protocolVersion": "2025-11-25",
            "capabilities": capabilities,
            "clientInfo": {"name": "raw", "version": "1"},
        }
        process.stdin.write(_rpc(1, "initialize", hello) + b"\n")
        await process.stdin.drain()
        assert "result" in await _answer_to(process, 1, seen)
        ready = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        process.stdin.write(json.dumps(ready).encode() + b"\n")
        process.stdin.write(_rpc(2, "tools/call", {"name": "refund", "arguments": REFUND}) + b"\n")
        await process.stdin.drain()
        answer = await _answer_to(process, 2, seen)
    finally:
        process.stdin.close()
        await asyncio.wait_for(process.wait(), 60)
    assert [m["method"] for m in seen] == []
    error = answer["error"]
    assert error["data"]["reason"] == "elicitation_unsupported"
    assert f"http://inbox.test/inbox/approvals/{error['data']['approval_id']}" in error["message"]
    assert site.executions("refund") == []


@pytest.mark.parametrize("mode", ["2026-07-28", "legacy"])
async def test_the_self_confirm_form_shows_every_argument_however_long_one_is(
    site: GatewaySite, mode: str
) -> None:
    """With edits not allowed the form's message is all the person sees of the arguments: a
    long `note` must not push the order the money goes to out of it."""
    text = site.config.read_text(encoding="utf-8").replace(
        'approval = { approvers = ["cfo"], expires_in = "1h" }',
        'approval = { allowed = ["approve", "reject"], expires_in = "1h" }',
    )
    site.config.write_text(text, encoding="utf-8")
    messages: list[str] = []

    async def person(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        assert isinstance(params, types.ElicitRequestFormParams)
        messages.append(params.message)
        return types.ElicitResult(action="decline")

    args = {"order_id": "Z-9", "amount": 1.0, "note": "thanks " * 400}
    async with Client(site.stdio(), mode=mode, elicitation_callback=person) as client:
        with pytest.raises(MCPError) as refused:
            await client.call_tool("refund", args, meta=run_meta("long-note"))
    assert refused.value.data["reason"] == "approval_rejected"
    [message] = messages
    assert '"order_id": "Z-9"' in message and '"amount": 1.0' in message
    assert "more characters" in message  # the cut note says it was cut
    assert site.executions("refund") == []


async def test_a_legacy_retry_of_a_read_that_needs_approval_uses_the_decided_approval(
    site: GatewaySite,
) -> None:
    site.write_config(wait=0)
    with site.config.open("a", encoding="utf-8") as config:
        config.write('\n[tools.balance]\napproval = { approvers = ["cfo"], expires_in = "1h" }\n')
    asked: list[str] = []

    async def opens(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        assert isinstance(params, types.ElicitRequestURLParams)
        asked.append(approval_of(params.url))
        return types.ElicitResult(action="accept")

    async with Client(site.stdio(), mode="legacy", elicitation_callback=opens) as client:
        with pytest.raises(MCPError) as waiting:  # nobody decided within wait_seconds
            await client.call_tool("balance", {"account": "C3"})
        assert waiting.value.code == types.URL_ELICITATION_REQUIRED
        await site.reviewer.decide(asked[0], Decision.approve(), "cfo")
        done = await client.call_tool("balance", {"account": "C3"})
    assert "C3" in done.content[0].text  # type: ignore[union-attr]
    assert len(asked) == 1, f"asked again for new approvals: {asked}"


async def test_an_upstream_that_dies_during_a_single_attempt_call_leaves_outcome_unknown(
    site: GatewaySite,
) -> None:
    """The refund ran on the upstream, which then died before answering: the gateway cannot
    know what it did, so the call must be `outcome_unknown`, never `failed` ("changed
    nothing"), which would let a reviewer approve the same refund again in good faith."""
    site.write_config(hold=True)

    async def cfo(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        assert isinstance(params, types.ElicitRequestURLParams)
        await site.reviewer.decide(approval_of(params.url), Decision.approve(), "cfo")
        return types.ElicitResult(action="accept")

    async with Client(site.stdio(), mode="2026-07-28", elicitation_callback=cfo) as client:
        call = asyncio.create_task(client.call_tool("refund", REFUND, meta=run_meta("dies")))
        await until(lambda: len(site.executions("refund")) == 1, 60, "the refund started")
        os.kill(site.executions("refund")[0]["pid"], signal.SIGKILL)  # the upstream, mid-call
        answer: types.CallToolResult | MCPError
        try:
            answer = await call
        except MCPError as e:
            answer = e
    assert isinstance(answer, MCPError), f"answered as if nothing ran: {answer}"
    assert answer.data["reason"] == "outcome_unknown"
    assert len(site.executions("refund")) == 1


def environ_of(pid: int) -> dict[str, str]:
    entries = Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")
    return dict(entry.split("=", 1) for entry in entries if entry)


async def test_a_stdio_upstream_gets_none_of_the_gateways_secrets(site: GatewaySite) -> None:
    """The upstream runs what its author wrote: it gets the config's variables and the SDK's
    few safe ones, never the gateway's KEK or database URL."""
    async with Client(site.stdio(), mode="2026-07-28") as client:
        await client.call_tool("balance", {"account": "E1"})
        [ran] = site.executions("balance")
        seen = environ_of(ran["pid"])
    secrets = {name: value for name, value in site.env().items() if name != "PYTHONPATH"}
    assert set(secrets) & set(seen) == set()
    assert set(secrets.values()) & set(seen.values()) == set()


@pytest.mark.parametrize(
    "state",
    ["sgs1." + "A" * 4_000_000, "sgs1.!!" + "A" * 100, "v1.AAAA", '{"approval":"apr-x"}'],
    ids=["huge", "not base64", "the SDK's own format", "plain JSON"],
)
async def test_a_forged_request_state_is_refused_and_the_gateway_serves_on(
    site: GatewaySite, state: str
) -> None:
    async with Client(site.stdio(), mode="2026-07-28") as client:
        with pytest.raises(MCPError) as refused:
            await client.session.call_tool(
                "refund",
                REFUND,
                input_responses={"approval": types.ElicitResult(action="accept")},
                request_state=state,
                allow_input_required=True,
            )
        read = await client.call_tool("balance", {"account": "F1"})
    assert refused.value.message == "Invalid or expired requestState"
    assert "F1" in read.content[0].text  # type: ignore[union-attr]
    assert site.executions("refund") == []


@pytest.mark.parametrize(
    "content",
    [
        {"approve": "yes"},
        {"approve": True, "ticket": "T-other"},  # sensitive: not offered
        {"approve": True, "note": "x"},  # not an argument of the call
        {"approve": True, "tag": ["a", "b"]},
        {"approve": True, "tag": 5},
        None,
    ],
    ids=["approve not a boolean", "sensitive", "not offered", "list", "wrong type", "no content"],
)
async def test_a_form_answer_that_was_not_asked_for_runs_nothing(
    site: GatewaySite, content: dict[str, Any] | None
) -> None:
    text = site.config.read_text(encoding="utf-8").replace(
        '[tools.tag_ticket]\napproval = { expires_in = "1h" }',
        '[tools.tag_ticket]\napproval = { expires_in = "1h" }\nsensitive = ["ticket"]',
    )
    site.config.write_text(text, encoding="utf-8")
    args = {"ticket": "T-9", "tag": "later"}
    async with Client(site.stdio(), mode="2026-07-28", elicitation_callback=opens_links) as client:
        asked = await client.session.call_tool(
            "tag_ticket", args, meta=run_meta("form"), allow_input_required=True
        )
        assert isinstance(asked, types.InputRequiredResult) and asked.input_requests
        form = asked.input_requests["approval"]
        assert isinstance(form, types.ElicitRequest)
        assert isinstance(form.params, types.ElicitRequestFormParams)
        assert set(form.params.requested_schema["properties"]) == {"approve", "tag"}
        with pytest.raises(MCPError) as refused:
            await client.session.call_tool(
                "tag_ticket",
                args,
                meta=run_meta("form"),
                input_responses={"approval": types.ElicitResult(action="accept", content=content)},
                request_state=asked.request_state,
                allow_input_required=True,
            )
    assert refused.value.data["reason"] == "confirmation_refused"
    assert site.executions("tag_ticket") == []


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"n": value}
    return value


@pytest.mark.parametrize(
    "args",
    [
        {**REFUND, "note": "x" * 4_000_000},
        {**REFUND, "note": nested(150)},
    ],
    ids=["huge", "deep"],
)
async def test_hostile_arguments_are_refused_and_the_gateway_serves_on(
    site: GatewaySite, args: dict[str, Any]
) -> None:
    asked: list[types.ElicitRequestParams] = []

    async def person(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        asked.append(params)
        return types.ElicitResult(action="decline")

    async with Client(site.stdio(), mode="2026-07-28", elicitation_callback=person) as client:
        with pytest.raises(MCPError) as refused:
            await client.call_tool("refund", args, meta=run_meta("hostile"))
        read = await client.call_tool("balance", {"account": "G1"})
    assert refused.value.code == types.INVALID_PARAMS  # the call refused, saying why
    assert "not storable" in refused.value.message or "bytes of JSON" in refused.value.message
    assert asked == []  # nobody was asked to approve what cannot be recorded
    assert "G1" in read.content[0].text  # type: ignore[union-attr]
    assert site.executions("refund") == []


async def test_a_call_id_reused_with_other_arguments_is_refused(site: GatewaySite) -> None:
    meta = cast(types.RequestParamsMeta, {"io.signoff/run": "reuse", "io.signoff/call": "c1"})
    async with Client(site.stdio(), mode="2026-07-28") as client:
        await client.call_tool("balance", {"account": "H1"}, meta=meta)
        with pytest.raises(MCPError) as refused:
            await client.call_tool("balance", {"account": "H2"}, meta=meta)
    assert refused.value.code == types.INVALID_PARAMS
    assert "other arguments" in refused.value.message
    assert [e["args"] for e in site.executions("balance")] == [{"account": "H1"}]


UPSTREAM = """\
public_url = "http://inbox.test"
[upstreams.{name}]
command = "{python}"
args = ["-m", "{module}", "{arg}"]
env = {{ PYTHONPATH = "{root}" }}
"""


@pytest.mark.parametrize(
    ("upstream", "extra", "said"),
    [
        ((HOSTILE, "endless-tools"), "", "upstream 'up' lists tools on more than"),
        ((UPSTREAM_MODULE, "stdio"), "[tools.nope]\napproval = false\n", "[tools.nope] names"),
    ],
    ids=["tools listed forever", "a tool no upstream lists"],
)
async def test_an_upstream_that_does_not_fit_stops_the_gateway_with_one_line(
    site: GatewaySite, upstream: tuple[str, str], extra: str, said: str
) -> None:
    module, arg = upstream
    config = UPSTREAM.format(name="up", python=sys.executable, module=module, arg=arg, root=ROOT)
    site.config.write_text(config + extra, encoding="utf-8")
    params = site.stdio()
    process = await asyncio.create_subprocess_exec(
        params.command,
        *params.args,
        env=params.env,
        cwd=params.cwd,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        _, stderr = await asyncio.wait_for(process.communicate(), 60)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 2
    assert said in stderr.decode().strip().splitlines()[-1]
