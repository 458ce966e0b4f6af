"""Tool calls through the MCP gateway: the official `mcp.Client` (2026-07-28 mode) calling the
read tool `balance` (no approval) through `signoff mcp` over stdio, whose config names the test
upstream (tests/support/mcp_upstream.py) over stdio, beside the same kind of client calling the
same upstream directly (the baseline), measured in the same run.

Each client is its own stdio connection: a gateway process (with its own upstream process) per
gateway client, an upstream process per direct client. The gateway runs as `python -m
adapters.cli mcp --config FILE --principal bench-agent` on a login that has only `signoff_app`,
with the run's KEK and no reviewer KEK; the owner made the data keys. Every call through it is
a read with a new call id: it runs on the upstream and the ledger records its intent and
outcome (two commits).

At each level of `--clients` (1: sequential calls; more: that many clients calling at once),
both paths are measured in turn in each of `--rounds` rounds, each for `--seconds`: a rate is
the median over the rounds, `ratio` (gateway / direct) the median of the rounds' own ratios,
latencies are over every call of every round. Prints one JSON line per level (`ours` = calls/s
through the gateway, `baseline` = direct, `ratio`, p50 / p99 latency of both, `overhead_ms` =
p50 through the gateway - p50 direct), then a summary as its last line: the figures at the
first level (sequential, by default) and each level's `ours` and `overhead_ms`. The database
comes from SIGNOFF_DATABASE_URL / DATABASE_URL, else the embedded server; a scratch database is
created and dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp_types import TextContent

from bench.common import Op, Rounds, bench_database, percentile, rate
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.logins import temporary_login
from tests.support.mcp_upstream import MODULE, stdio_parameters

ROOT = Path(__file__).resolve().parent.parent
MODE = "2026-07-28"
TOOL = "balance"
LEVELS = (1, 4)
PATHS = ("baseline", "ours")  # direct, through the gateway; measured in this order each round


def gateway_config(public_url: str) -> str:
    """The gateway's TOML: the test upstream over stdio, `balance` a read without approval
    (as its annotations say; written out so the figures never depend on them)."""
    q = json.dumps  # a JSON string is a TOML basic string
    return "\n".join(
        [
            f"public_url = {q(public_url)}",
            "[upstreams.bank]",
            f"command = {q(sys.executable)}",
            f'args = ["-m", {q(MODULE)}, "stdio"]',
            f"env = {{ PYTHONPATH = {q(str(ROOT))} }}",
            f"[tools.{TOOL}]",
            'effect = "read"',
            "approval = false",
            "",
        ]
    )


def gateway_parameters(config: Path, database_url: str, kek: bytes) -> StdioServerParameters:
    """How the client starts `signoff mcp` over stdio: the SDK passes the child only a few
    variables of this environment, so the database, the KEK and the path are given here."""
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "adapters.cli", "mcp", "--config", str(config), "--principal", "bench-agent"],
        env={
            "PYTHONPATH": str(ROOT),
            "SIGNOFF_DATABASE_URL": database_url,
            "SIGNOFF_KEK": base64.b64encode(kek).decode(),
        },
        cwd=ROOT,
    )


def calls(clients: list[Client], into: list[float]) -> Callable[[int], Op]:
    """Client `i` calls `balance` once per op; each call's latency goes into `into`."""

    def op_for(i: int) -> Op:
        client = clients[i]

        async def op(n: int) -> None:
            started = time.perf_counter()
            result = await client.call_tool(TOOL, {"account": f"A{i}-{n}"})
            into.append(time.perf_counter() - started)
            [content] = result.content
            if result.is_error or not isinstance(content, TextContent):
                raise RuntimeError(f"{TOOL} failed: {result}")

        return op

    return op_for


async def level(
    n: int, parameters: dict[str, StdioServerParameters], seconds: float, rounds: int
) -> dict[str, Any]:
    """Both paths with `n` clients each, connected for the whole level."""
    async with AsyncExitStack() as stack:
        clients: dict[str, list[Client]] = {}
        for path in PATHS:
            clients[path] = [
                await stack.enter_async_context(
                    Client(parameters[path], mode=MODE, read_timeout_seconds=60)
                )
                for _ in range(n)
            ]
        latencies: dict[str, list[float]] = {path: [] for path in PATHS}
        for path in PATHS:  # warm up: imports, pools, the ring, the SDK's caches
            await rate(n, 0.5, calls(clients[path], []))
        measured = Rounds()
        for _ in range(rounds):
            rates = {
                path: await rate(n, seconds, calls(clients[path], latencies[path]))
                for path in PATHS
            }
            for path in PATHS:
                measured.note(path, rates[path])
            measured.compare("ratio", rates["ours"], rates["baseline"])

    def ms(path: str, q: float) -> float:
        return round(percentile(latencies[path], q) * 1000, 2)

    return {
        "clients": n,
        "ours": measured.figure("ours"),
        "baseline": measured.figure("baseline"),
        "ratio": measured.ratio("ratio", 3),
        "p50_ms": ms("ours", 0.5),
        "p99_ms": ms("ours", 0.99),
        "baseline_p50_ms": ms("baseline", 0.5),
        "baseline_p99_ms": ms("baseline", 0.99),
        "overhead_ms": round(ms("ours", 0.5) - ms("baseline", 0.5), 2),
        "calls": len(latencies["ours"]),
        "baseline_calls": len(latencies["baseline"]),
        "ratio_rounds": measured.spread("ratio", 3),
    }


async def main(levels: list[int], seconds: float, rounds: int) -> dict[str, Any]:
    kek = os.urandom(32)
    async with bench_database() as url, AsyncExitStack() as stack:
        async with await Database.connect(url, pool_size=1) as owner:
            await KeyRing.open(owner, LocalKek(kek))  # the owner makes the data keys
        worker_url = await stack.enter_async_context(temporary_login(url, "signoff_app"))
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="signoff-bench-")))
        config = folder / "signoff-mcp.toml"
        # Never opened: `balance` needs no approval, so no reviewer is sent anywhere.
        config.write_text(gateway_config("http://127.0.0.1:9"), encoding="utf-8")
        parameters = {
            "baseline": stdio_parameters(),
            "ours": gateway_parameters(config, worker_url, kek),
        }
        results = []
        for n in levels:
            figures = await level(n, parameters, seconds, rounds)
            print(json.dumps({"benchmark": "mcp_gateway", "unit": "calls/s", **figures}))
            results.append(figures)
    first = results[0]
    return {
        **{k: v for k, v in first.items() if k != "ratio_rounds"},
        "rounds": rounds,
        "levels": {str(r["clients"]): r["ours"] for r in results},
        "overhead_ms_levels": {str(r["clients"]): r["overhead_ms"] for r in results},
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--clients", default=",".join(map(str, LEVELS)), help="client counts, one level each"
    )
    parser.add_argument(
        "--seconds", type=float, default=3.0, help="length of each path's run in each round"
    )
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds per level")
    args = parser.parse_args()
    levels = [int(n) for n in args.clients.split(",")]
    figures = asyncio.run(main(levels, args.seconds, args.rounds))
    print(json.dumps({"benchmark": "mcp_gateway", "unit": "calls/s", **figures}))
