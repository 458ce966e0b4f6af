"""The MCP gateway as its clients meet it: `signoff mcp` in a process of its own, on a login
with only `signoff_app` and no reviewer KEK, in front of the test upstream (`mcp_upstream`,
started by the gateway over stdio), and a reviewer's store on the same database."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp.client.context import ClientRequestContext
from mcp.client.stdio import StdioServerParameters

from approvals import ApprovalStore
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.settings import Settings

from .mcp_upstream import LOG_ENV, MODULE, executions
from .processes import ROOT, TEST_KEK, TEST_REVIEWER_KEK
from .worker_login import WorkerLogin, worker_login

__all__ = ["GatewaySite", "approval_of", "gateway_site", "opens_links", "url_of"]

CONFIG = """\
public_url = "http://inbox.test"
wait_seconds = {wait}

[upstreams.pay]
command = "{python}"
args = ["-m", "{module}", "stdio"]
env = {{ PYTHONPATH = "{root}", {log_env} = "{log}"{hold} }}

[tools.refund]
approval = {{ approvers = ["cfo"], expires_in = {expires} }}
headline = ["amount"]

[tools.tag_ticket]
approval = {{ expires_in = "1h" }}
"""


def url_of(answer: types.InputRequiredResult) -> str:
    """The inbox URL a four-eyes `input_required` answer asks the client to open."""
    assert answer.input_requests is not None
    request = answer.input_requests["approval"]
    assert isinstance(request, types.ElicitRequest)
    assert isinstance(request.params, types.ElicitRequestURLParams)
    return request.params.url


def approval_of(url: str) -> str:
    """The approval id of an inbox URL (`.../inbox/approvals/<id>`)."""
    return url.rsplit("/", 1)[1]


async def opens_links(
    context: ClientRequestContext, params: types.ElicitRequestParams
) -> types.ElicitResult | types.ErrorData:
    """A person at the client who opens every link and decides nothing: a client with it
    declares elicitation, as one that asks its user does."""
    return types.ElicitResult(action="accept")


@dataclass
class GatewaySite:
    """A database with a worker login, a gateway config over the test upstream, and a reviewer.

    Attributes:
        reviewer: a store on the owner's login with the reviewer KEK (decides, signed).
    """

    login: WorkerLogin
    config: Path
    log: Path
    hold: Path
    reviewer: ApprovalStore
    owner: Database

    def executions(self, tool: str | None = None) -> list[dict[str, Any]]:
        return [e for e in executions(self.log) if tool is None or e["tool"] == tool]

    def env(self) -> dict[str, str]:
        """The gateway's environment: the worker login and the worker KEK, nothing else of
        Signoff's (no reviewer KEK)."""
        return {
            "PYTHONPATH": str(ROOT),
            "SIGNOFF_DATABASE_URL": self.login.url,
            "SIGNOFF_KEK": base64.b64encode(TEST_KEK).decode(),
        }

    def stdio(self, *args: str, env: dict[str, str] | None = None) -> StdioServerParameters:
        """How a client starts `signoff mcp` over stdio, with more `args` (and `env`)."""
        return StdioServerParameters(
            command=sys.executable,
            args=["-m", "adapters.cli", "mcp", "--config", str(self.config), *args],
            env={**self.env(), **(env or {})},
            cwd=ROOT,
        )

    async def serve_http(
        self, env: dict[str, str] | None = None
    ) -> tuple[str, asyncio.subprocess.Process]:
        """`signoff mcp --http` on a free port in a process of its own (with `env` added), once
        it listens: its endpoint and its process (the caller kills it)."""
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "adapters.cli",
            "mcp",
            "--config",
            str(self.config),
            "--http",
            "127.0.0.1:0",
            "--json",
            cwd=ROOT,
            # Nothing of this process's Signoff settings (its reviewer KEK above all).
            env={**_without_signoff(os.environ), **self.env(), **(env or {})},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        assert process.stdout is not None and process.stderr is not None
        line = await asyncio.wait_for(process.stdout.readline(), 60)
        if not line:
            stderr = (await process.stderr.read()).decode()
            raise AssertionError(f"the gateway did not listen: {stderr[-2000:]}")
        return json.loads(line)["url"], process

    def write_config(self, *, wait: float = 5, expires: str = '"1h"', hold: bool = False) -> None:
        held = f', SIGNOFF_UPSTREAM_HOLD = "{self.hold}"' if hold else ""
        self.config.write_text(
            CONFIG.format(
                wait=wait,
                python=sys.executable,
                module=MODULE,
                root=ROOT,
                log_env=LOG_ENV,
                log=self.log,
                hold=held,
                expires=expires,
            ),
            encoding="utf-8",
        )


def _without_signoff(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if not k.startswith("SIGNOFF_")}


@asynccontextmanager
async def gateway_site(server_url: str, directory: Path) -> AsyncIterator[GatewaySite]:
    async with worker_login(server_url, LocalKek(TEST_KEK), prefix="signoff_mcp") as login:
        settings = Settings(
            database_url=login.owner_url,
            kek=LocalKek(TEST_KEK),
            reviewer_kek=LocalKek(TEST_REVIEWER_KEK),
        )
        async with await Database.connect(login.owner_url, settings=settings) as db:
            ring = await KeyRing.open(db)
            reviewer = ApprovalStore(db, ring)
            site = GatewaySite(
                login,
                directory / "gateway.toml",
                directory / "up.log",
                directory / "hold",
                reviewer,
                db,
            )
            site.write_config()
            try:
                yield site
            finally:
                await reviewer.close()
                if site.hold.exists():
                    os.unlink(site.hold)
