"""The Grafana dashboard (docs/pages/operations/grafana-dashboard.json) against a real
Prometheus: `signoff serve` and `prometheus` as processes of their own on loopback, Prometheus
scraping the service every second with an auditor's token, a short load through the service and
the ledger, then every panel's query answered with at least one series.

The test needs Debian's `prometheus` package (the binary on PATH); without it the test is
skipped, unless SIGNOFF_REQUIRE_PROMETHEUS is set (CI sets it), then it fails."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.http.metrics import Metrics
from adapters.http.standby import lag_gauges
from approvals import ApprovalPolicy, ApprovalStore, ReviewerDirectory
from ledger.calls.model import ToolCall
from ledger.calls.service import ToolLedger
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.logins import temporary_login

from .support.http import ask_tool, bearer, token_for, unique
from .support.inbox import token_of
from .support.ports import free_port
from .support.processes import ROOT, TEST_KEK, TEST_REVIEWER_KEK, kek_env
from .support.service_load import done, outcome_unknown
from .support.until import until

DASHBOARD = ROOT / "docs" / "pages" / "operations" / "grafana-dashboard.json"
MONITORING = ROOT / "docs" / "pages" / "operations" / "monitoring.md"
GUARD = 90  # seconds before a stuck step fails instead of hanging
# What Grafana would put in place of its variables; a query left with a `$` fails the test.
VARIABLES = {"$__rate_interval": "30s", "$__interval": "5s", "$job": "signoff"}

_METRIC = re.compile(r"\bsignoff_[a-z_]+")
_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return loaded


def targets() -> Iterator[tuple[str, str, str]]:
    """(panel title, ref id, query) of every panel target, rows' panels included."""

    def walk(panels: list[dict[str, Any]]) -> Iterator[tuple[str, str, str]]:
        for panel in panels:
            yield from walk(panel.get("panels", []))
            for target in panel.get("targets", []):
                yield panel["title"], target["refId"], target["expr"]

    yield from walk(dashboard()["panels"])


def query_of(expr: str) -> str:
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    return expr


def exposed() -> dict[str, set[str]]:
    """Each metric family of the service, a standby's included: the names its samples carry."""
    found: dict[str, set[str]] = {}
    registry = Metrics().registry
    lag_gauges(registry)
    for family in registry.collect():
        suffixes = _SUFFIXES.get(family.type, ("",))
        found[family.name] = {family.name + s for s in suffixes}
    return found


def test_the_dashboard_queries_only_what_the_service_exposes_and_the_page_lists_it() -> None:
    board = dashboard()
    assert [i["name"] for i in board["__inputs"]] == ["DS_PROMETHEUS"]
    families = exposed()
    names = set().union(*families.values())
    used: set[str] = set()
    for title, ref, expr in targets():
        assert "$" not in query_of(expr), f"{title} ({ref}): a variable the test cannot fill"
        found = set(_METRIC.findall(expr))
        assert found, f"{title} ({ref}) queries no signoff metric"
        assert found <= names, f"{title} ({ref}): {sorted(found - names)} are not exposed"
        used |= found
    page = MONITORING.read_text(encoding="utf-8")
    for family, samples in families.items():
        listed = family + "_total" if f"{family}_total" in samples else family  # as scraped
        assert re.search(rf"`{listed}[`{{]", page), f"{listed} is not listed on {MONITORING.name}"
        assert samples & used, f"no panel shows {family}"


# -- against a real Prometheus ------------------------------------------------------------------


def prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found is None:
        if os.environ.get("SIGNOFF_REQUIRE_PROMETHEUS"):
            pytest.fail("SIGNOFF_REQUIRE_PROMETHEUS is set and no prometheus is on PATH")
        pytest.skip("no prometheus on PATH (apt-get install prometheus)")
    return found


async def stop(process: asyncio.subprocess.Process) -> None:
    """SIGTERM, then SIGKILL if it has not ended within a while."""
    if process.returncode is None:
        process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), 20)
        except TimeoutError:
            process.kill()
            await process.wait()


@asynccontextmanager
async def signoff_serve(database_url: str, folder: Path) -> AsyncIterator[str]:
    """`signoff serve` in a process of its own, with a webhook nobody answers (its backlog and
    failures grow) and the same database as its read URL (not a standby: its lag gauges say 0);
    its base URL."""
    env = {
        **kek_env(),
        "PYTHONPATH": str(ROOT),
        "SIGNOFF_DATABASE_URL": database_url,
        "SIGNOFF_READ_DATABASE_URL": database_url,
        "SIGNOFF_WEBHOOK_URL": f"http://127.0.0.1:{free_port()}/hook",
        "SIGNOFF_WEBHOOK_SECRET": uuid.uuid4().hex,
    }
    with (folder / "serve.log").open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "adapters.cli", "serve", "--port", "0", "--json",
            cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=log, env=env,
        )  # fmt: skip
    assert process.stdout is not None
    try:
        line = await asyncio.wait_for(process.stdout.readline(), GUARD)
        assert line, (folder / "serve.log").read_text()
        yield json.loads(line)["url"]
    finally:
        await stop(process)


@asynccontextmanager
async def prometheus(folder: Path, target: str, token: str) -> AsyncIterator[httpx.AsyncClient]:
    """Prometheus scraping `target` every second with `token`, on a free loopback port, its
    storage in `folder`; a client of its HTTP API, once it is ready."""
    binary = prometheus_binary()
    (folder / "token").write_text(token, encoding="utf-8")
    config = folder / "prometheus.yml"
    config.write_text(
        f"""global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: signoff
    scrape_timeout: 1s
    authorization:
      credentials_file: {folder / "token"}
    static_configs:
      - targets: ["{target}"]
""",
        encoding="utf-8",
    )
    port = free_port()
    with (folder / "prometheus.log").open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            stdout=log,
            stderr=log,
        )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=GUARD) as api:

            async def ready() -> bool:
                if process.returncode is not None:
                    said = (folder / "prometheus.log").read_text(errors="replace")
                    raise AssertionError(f"prometheus exited: {said[-2000:]}")
                try:
                    return (await api.get("/-/ready")).status_code == 200
                except httpx.TransportError:
                    return False

            await until(ready, GUARD, "prometheus ready")
            yield api
    finally:
        await stop(process)


async def query(api: httpx.AsyncClient, promql: str) -> list[dict[str, Any]]:
    response = await api.get("/api/v1/query", params={"query": promql})
    assert response.status_code == 200, f"{promql}: {response.text}"
    body = response.json()
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


async def scalar(api: httpx.AsyncClient, promql: str) -> float:
    """The query's one value (0 while it has none)."""
    found = await query(api, promql)
    return float(found[0]["value"][1]) if found else 0.0


async def load(url: str, owner: Database, store: ApprovalStore, ledger: ToolLedger) -> None:
    """Approvals requested and decided through the service, calls through the ledger, one left
    outcome_unknown, and refused credentials."""
    ann, bob, cas = unique("ann"), unique("bob"), unique("cas")
    await ReviewerDirectory(owner).add(cas, [], by="admin")
    tokens = {who: await token_for(owner, who) for who in (ann, bob, cas)}
    decisions = [
        (
            await ask_tool(
                store, "wire", ApprovalPolicy(approvers=frozenset({ann, bob}), quorum=2)
            ),
            ann,
        ),
        (await ask_tool(store, "refund", ApprovalPolicy(approvers=frozenset({ann}))), ann),
        (await ask_tool(store, "lookup", ApprovalPolicy()), cas),
    ]
    decisions.insert(1, (decisions[0][0], bob))  # the quorum's second vote
    for tool in ("refund", "wire"):  # left pending
        await ask_tool(store, tool, ApprovalPolicy(approvers=frozenset({ann})))
    async with httpx.AsyncClient(base_url=url, timeout=GUARD) as client:
        for approval_id, who in decisions:
            decided = await client.post(
                f"/v1/approvals/{approval_id}/decision",
                headers={**tokens[who], "Idempotency-Key": uuid.uuid4().hex},
                json={"decision": "approve"},
            )
            assert decided.status_code == 200, decided.text
        refused = await client.get("/v1/approvals", headers=bearer(f"sgf_{uuid.uuid4().hex}"))
        assert refused.status_code == 401
    for i in range(4):
        await ledger.execute(ToolCall(unique("load"), f"c{i}", "lookup", {"n": i}), done)
    await outcome_unknown(ledger, "refund")


@pytest.mark.timeout(400)
async def test_every_panel_of_the_dashboard_has_data_in_a_real_prometheus(
    fresh_database_url: str, tmp_path: Path
) -> None:
    prometheus_binary()
    async with await Database.connect(fresh_database_url) as owner:
        ring = await KeyRing.open(
            owner, LocalKek(TEST_KEK), reviewer_kek=LocalKek(TEST_REVIEWER_KEK)
        )
        auditor = await token_for(owner, "prometheus", scope="auditor")
        store = ApprovalStore(owner, ring, poll_interval=0.05)
        ledger = ToolLedger(owner, ring, lease_seconds=1.0, poll_interval=0.05)
        try:
            async with (
                temporary_login(fresh_database_url, "signoff_reviewer") as login,
                signoff_serve(login, tmp_path) as url,
                prometheus(tmp_path, url.removeprefix("http://"), token_of(auditor)) as api,
            ):

                async def scraped() -> bool:
                    return await scalar(api, 'up{job="signoff"}') == 1

                await until(scraped, GUARD, "prometheus scraped the service")
                await load(url, owner, store, ledger)

                # The load as Prometheus sees it (the gauges sample at most every 5 s) ...
                async def seen() -> bool:
                    return (
                        await scalar(api, "max(signoff_calls_outcome_unknown)") == 1
                        and await scalar(api, "max(signoff_approvals_pending)") == 2
                        and await scalar(api, "sum(signoff_approval_wait_seconds_count)") == 3
                    )

                await until(seen, GUARD, "the load scraped")
                # ... and a few scrapes more, so that every rate has two samples of it.
                scrapes = 'count_over_time(up{job="signoff"}[1h])'
                start = await scalar(api, scrapes)

                async def scraped_again() -> bool:
                    return await scalar(api, scrapes) >= start + 3

                await until(scraped_again, GUARD, "three more scrapes")
                empty = [
                    f"{title} ({ref}): {expr}"
                    for title, ref, expr in targets()
                    if not await query(api, query_of(expr))
                ]
        finally:
            await ledger.close()
            await store.close()
    assert empty == [], "panels without data:\n" + "\n".join(empty)
