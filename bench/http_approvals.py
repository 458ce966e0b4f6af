"""Decisions through the HTTP API: a reviewer POSTs `/v1/approvals/{id}/decision` -> the agent
waiting on that approval wakes, with 8 concurrent reviewers, beside the same flow deciding with
`ApprovalStore.decide` (the baseline), measured in the same run.

Everything runs in this process, as separate parties would: the agents (the waiters) with an
`ApprovalStore` of their own on a login that has only `signoff_app` and a key ring without the
reviewer KEK; the service (`open_service`, served by `running()` on a free loopback port) on a
login that has only `signoff_reviewer`; each reviewer an HTTP client with an API token of its
own (keep-alive). Each flow: the agent requests an approval and waits for it (`store.wait`,
woken by NOTIFY); its reviewer decides; latency is from the start of the decision (the POST, or
the `decide` call on the service's own store for the baseline) to the agent waking. The rate
counts whole flows (request, decision, wake), one decision each, per second; rounds of the two
paths alternate.

Prints one JSON object as its last line. The database comes from SIGNOFF_DATABASE_URL /
DATABASE_URL, else the embedded server; a scratch database is created and dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack

import httpx

from adapters.http.server import running
from adapters.http.service import open_service
from approvals import ApiTokens, ApprovalPolicy, ApprovalStore, Decision
from bench.common import Op, bench_database, percentile, rate
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.logins import temporary_login
from ledger.store.settings import Settings

REVIEWERS = 8
ROUNDS = 2

Decide = Callable[[int, str, str], Awaitable[None]]
"""Reviewer `i` decides approval `id` with request id `rid`."""


async def main(seconds: float) -> dict[str, object]:
    kek, reviewer_kek = LocalKek(os.urandom(32)), LocalKek(os.urandom(32))
    async with bench_database() as url, AsyncExitStack() as stack:
        # Settings of its own for each side: the environment's KEKs are not this run's.
        owner_settings = Settings(database_url=url, kek=kek, reviewer_kek=reviewer_kek)
        owner = await Database.connect(url, pool_size=2, settings=owner_settings)
        stack.push_async_callback(owner.close)
        await KeyRing.open(owner, kek, reviewer_kek=reviewer_kek)  # makes every key
        worker_url = await stack.enter_async_context(temporary_login(url, "signoff_app"))
        reviewer_url = await stack.enter_async_context(temporary_login(url, "signoff_reviewer"))

        # The agents' side: their own database pool and a ring that only verifies.
        agents_settings = Settings(database_url=worker_url, kek=kek, reviewer_kek=None)
        agents_db = await Database.connect(
            worker_url, pool_size=REVIEWERS + 2, settings=agents_settings
        )
        stack.push_async_callback(agents_db.close)
        agents = ApprovalStore(agents_db, await KeyRing.open(agents_db, kek, create_missing=False))
        stack.push_async_callback(agents.close)

        # The reviewers' side: the service, and one token and HTTP client per reviewer.
        settings = Settings(database_url=reviewer_url, kek=kek, reviewer_kek=reviewer_kek)
        service = await open_service(settings, pool_size=REVIEWERS + 2)
        stack.push_async_callback(service.close)
        _, port = await stack.enter_async_context(running(service))
        names = [f"bench-reviewer-{i}" for i in range(REVIEWERS)]
        clients = []
        for name in names:
            token = (await ApiTokens(owner).create(name, by="bench")).token
            client = httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{port}",
                headers={"Authorization": f"Bearer {token}"},
                timeout=30,
            )
            clients.append(await stack.enter_async_context(client))

        async def over_http(i: int, approval_id: str, request_id: str) -> None:
            response = await clients[i].post(
                f"/v1/approvals/{approval_id}/decision",
                json={"decision": "approve"},
                headers={"Idempotency-Key": request_id},
            )
            if response.status_code != 200:
                raise RuntimeError(f"decision answered {response.status_code}: {response.text}")

        async def by_store(i: int, approval_id: str, request_id: str) -> None:
            await service.store.decide(
                approval_id, Decision.approve(), names[i], request_id=request_id
            )

        latencies: dict[str, list[float]] = {"http": [], "store": []}

        def flows(decide: Decide, into: list[float]) -> Callable[[int], Op]:
            def flow(i: int) -> Op:
                run_id = f"bench-{i}-{uuid.uuid4().hex[:6]}"
                policy = ApprovalPolicy(approvers=frozenset({names[i]}))

                async def op(n: int) -> None:
                    approval = await agents.request(
                        run_id=run_id,
                        tool="refund",
                        args={"order": f"A-{n}", "amount": n},
                        call_id=f"call-{n}",
                        requested_by="bench-agent",
                        policy=policy,
                    )
                    woke = 0.0

                    async def agent_waits() -> None:
                        nonlocal woke
                        decided = await agents.wait(approval.approval_id, 30)
                        woke = time.perf_counter()
                        if not decided.status.runs_tool:
                            raise RuntimeError(f"not approved: {decided.status}")

                    waiting = asyncio.create_task(agent_waits())
                    started = time.perf_counter()
                    await decide(i, approval.approval_id, f"{run_id}/{n}")
                    await waiting
                    into.append(woke - started)

                return op

            return flow

        rates: dict[str, list[float]] = {"http": [], "store": []}
        paths = {"http": over_http, "store": by_store}
        for decide in paths.values():  # warm up
            await rate(REVIEWERS, 0.5, flows(decide, []))
        for _ in range(ROUNDS):
            for key, decide in paths.items():
                rates[key].append(
                    await rate(REVIEWERS, seconds / ROUNDS, flows(decide, latencies[key]))
                )
    ours, baseline = statistics.fmean(rates["http"]), statistics.fmean(rates["store"])
    ms = 1000.0

    def latency(key: str, q: float) -> float:
        return round(percentile(latencies[key], q) * ms, 2)

    return {
        "ours": round(ours, 1),
        "baseline": round(baseline, 1),
        "ratio": round(ours / baseline, 4),
        "reviewers": REVIEWERS,
        "decisions": len(latencies["http"]),
        "baseline_decisions": len(latencies["store"]),
        "latency_p50_ms": latency("http", 0.5),
        "latency_p99_ms": latency("http", 0.99),
        "baseline_latency_p50_ms": latency("store", 0.5),
        "baseline_latency_p99_ms": latency("store", 0.99),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--seconds", type=float, default=10.0, help="length of each path's measurement"
    )
    args = parser.parse_args()
    figures = asyncio.run(main(args.seconds))
    print(json.dumps({"benchmark": "http_approvals", "unit": "decisions/s", **figures}))
