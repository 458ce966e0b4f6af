"""The gateway's config file: every mistake is one line naming the key, at start, before any
tool is served; annotations fill what the file leaves out."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest

from adapters.mcp.config import GatewayConfigError, parse_config
from adapters.mcp.upstreams import route_of
from approvals import ApprovalTier
from ledger.calls.model import Effect

from .support.mcp_upstream import MODULE
from .support.processes import ROOT, kek_env, run_cli

UPSTREAM = {"pay": {"command": "python", "args": ["-m", "pay"]}}
BASE: dict[str, Any] = {"public_url": "https://signoff.example", "upstreams": UPSTREAM}


@pytest.mark.parametrize(
    ("change", "names"),
    [
        ({"upstreams": {}}, "[upstreams.<name>]"),
        ({"public_url": "ftp://x"}, "public_url"),
        ({"wait_seconds": -1}, "wait_seconds"),
        ({"colour": "blue"}, "'colour'"),
        ({"upstreams": {"pay": {"command": "x", "url": "https://x"}}}, "[upstreams.pay]"),
        ({"upstreams": {"pay pal": {"command": "x"}}}, "[upstreams.pay pal]"),
        ({"tools": {"refund": {"effect": "maybe"}}}, "[tools.refund] effect"),
        ({"tools": {"refund": {"approval": "yes"}}}, "[tools.refund] approval"),
        ({"tools": {"refund": {"approval": {"quorum": 2}}}}, "[tools.refund] approval"),
        ({"tools": {"refund": {"approval": {"expires_in": "soon"}}}}, "expires_in"),
        ({"tools": {"refund": {"approval": {"allowed": ["maybe"]}}}}, "[tools.refund] approval"),
        ({"tools": {"refund": {"headline": "amount"}}}, "[tools.refund] headline"),
        ({"defaults": {"approval": False}}, "[defaults] approval"),
    ],
)
def test_a_mistake_is_one_line_naming_its_key(change: dict[str, Any], names: str) -> None:
    with pytest.raises(GatewayConfigError) as refused:
        parse_config({**BASE, **change})
    assert names in str(refused.value) and "\n" not in str(refused.value)


def tool(name: str, **hints: Any) -> types.Tool:
    annotations = types.ToolAnnotations(**hints) if hints else None
    schema = {"type": "object", "properties": {"amount": {"type": "number"}}}
    return types.Tool(name=name, input_schema=schema, annotations=annotations)


@pytest.mark.parametrize(
    ("hints", "effect", "approval"),
    [
        ({}, Effect.SINGLE_ATTEMPT, True),
        ({"read_only_hint": True}, Effect.READ, False),
        ({"idempotent_hint": True}, Effect.IDEMPOTENT_WRITE, True),
        ({"destructive_hint": False}, Effect.SINGLE_ATTEMPT, False),
    ],
)
def test_annotations_fill_what_the_file_leaves_out(
    hints: dict[str, Any], effect: Effect, approval: bool
) -> None:
    spec = route_of(parse_config(BASE), "pay", tool("refund", **hints)).spec
    assert spec.effect is effect and (spec.approval is not None) is approval
    if spec.approval is not None:  # the default: four-eyes, any listed reviewer
        assert spec.approval.tier is ApprovalTier.FOUR_EYES and spec.approval.any_reviewer


def test_the_file_wins_over_annotations_and_untrusted_ones_lift_nothing() -> None:
    said = {
        "refund": {"effect": "read", "approval": {"approvers": ["cfo"]}, "sensitive": ["amount"]}
    }
    spec = route_of(parse_config({**BASE, "tools": said}), "pay", tool("refund")).spec
    assert spec.effect is Effect.READ and spec.approval is not None
    assert spec.approval.approvers == {"cfo"} and spec.approval.sensitive == {"amount"}
    assert spec.approval.args_schema is not None  # the upstream's schema, for edits

    distrust = parse_config({**BASE, "trust_annotations": False})
    spec = route_of(distrust, "pay", tool("refund", read_only_hint=True)).spec
    assert spec.effect is Effect.SINGLE_ATTEMPT and spec.approval is not None


def test_namespaced_tools_carry_their_upstream_s_name() -> None:
    route = route_of(parse_config({**BASE, "namespace": True}), "pay", tool("refund"))
    assert (route.tool.name, route.upstream_tool) == ("pay__refund", "refund")


@pytest.mark.parametrize(
    ("config", "says"),
    [
        (
            "public_url = 'https://x'\n[upstreams.pay]\ncommand = '/nonexistent/mcp'\n",
            "cannot be reached",
        ),
        (
            "public_url = 'https://x'\n[upstreams.pay]\n"
            f"command = '{sys.executable}'\nargs = ['-m', '{MODULE}', 'stdio']\n"
            f"env = {{ PYTHONPATH = '{ROOT}' }}\n[tools.wire_money]\napproval = false\n",
            "[tools.wire_money] names a tool no upstream lists",
        ),
        ("public_url = [\n", "is not TOML"),
    ],
)
async def test_signoff_mcp_says_what_is_wrong_in_one_line_and_exits_2(
    database_url: str, tmp_path: Path, config: str, says: str
) -> None:
    path = tmp_path / "gateway.toml"
    path.write_text(config, encoding="utf-8")
    result = await run_cli("mcp", "--config", str(path), database_url=database_url, env=kek_env())
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.code == 2 and len(lines) == 1 and says in lines[0], result.stderr
    assert result.stdout == ""
