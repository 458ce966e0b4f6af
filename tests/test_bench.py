"""Every benchmark still runs: each `python -m bench.NAME`, briefly, on the session's server,
prints its JSON figures as its last line. (Speed is never asserted here; the figures are the
benchmarks' own business.)"""

from __future__ import annotations

import json

import pytest

from .support.processes import finish, start_program

BRIEF = {
    "approvals": ("--seconds", "0.5", "--baseline-seconds", "0.2"),
    "audit_scale": ("--sizes", "2000,6000", "--new", "100", "--append-events", "1600", "--check"),
    "checkpoints": ("--seconds", "0.1", "--rounds", "1"),
    "decisions": ("--seconds", "0.1"),
    "http_approvals": ("--seconds", "0.5"),
    "journal_append": ("--seconds", "0.2", "--rounds", "1"),
    "mcp_gateway": ("--clients", "1,2", "--seconds", "0.3", "--rounds", "1"),
    "openai_agents_adapter": ("--seconds", "0.3", "--rounds", "1"),
    "pydantic_ai_adapter": ("--calls", "3", "--seconds", "0.2", "--rounds", "1"),
    "policy_history": ("--calls", "200", "--other-runs", "20", "--judges", "20", "--rounds", "1"),
    "scale_out": ("--levels", "1,2", "--seconds", "0.5", "--baseline-seconds", "0.2"),
    "table_growth": ("--sizes", "200,2000", "--rounds", "3"),
    "tool_ledger": ("--seconds", "0.2", "--rounds", "1"),
    "verify": ("--events", "200", "--rounds", "1"),
}


@pytest.mark.parametrize("name", sorted(BRIEF))
async def test_the_benchmark_runs_and_prints_its_figures(name: str, server_url: str) -> None:
    process = await start_program(
        f"bench.{name}", *BRIEF[name], env={"SIGNOFF_DATABASE_URL": server_url}
    )
    last = (await finish(process, within=300)).strip().splitlines()[-1]
    figures = json.loads(last)
    assert figures["benchmark"] == name
    assert isinstance(figures.get("ours"), int | float) and figures["ours"] > 0
