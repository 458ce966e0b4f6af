"""The database-state gauges, the approval wait and the group commit sizes on `GET /metrics`, over
real HTTP: uvicorn in this process, its login one that has only `signoff_reviewer`, each test on
a database of its own, so that a gauge's value is exactly what the test made."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

from adapters.http.gauges import OTHER_TOOL, StateSampler, tool_labels
from adapters.http.server import running
from adapters.http.service import Service, open_service
from approvals import ApprovalPolicy, ApprovalStore, ReviewerDirectory
from ledger.calls.model import ToolCall
from ledger.calls.service import ToolLedger
from ledger.keys import KeyRing, LocalKek
from ledger.keys.budget import BUDGET
from ledger.store import Database, group_sizes
from ledger.store.logins import temporary_login
from ledger.store.settings import Settings, WebhookSettings

from .support.http import ask_tool, token_for, unique
from .support.ports import free_port
from .support.processes import TEST_KEK, TEST_REVIEWER_KEK
from .support.service_load import done, outcome_unknown
from .support.until import until

GUARD = 60  # seconds before a stuck step fails instead of hanging

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@dataclass
class Served:
    client: httpx.AsyncClient
    service: Service
    owner: Database
    store: ApprovalStore
    ledger: ToolLedger
    auditor: dict[str, str]

    @property
    def sampler(self) -> StateSampler:
        sampler = self.service.metrics.database_sampler
        assert isinstance(sampler, StateSampler)
        return sampler

    async def scrape(self) -> Samples:
        response = await self.client.get("/metrics", headers=self.auditor)
        assert response.status_code == 200, response.text
        return {
            (sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(response.text)
            for sample in family.samples
        }

    async def fresh(self) -> Samples:
        """A scrape that reads the database now, whenever the last one did."""
        interval, self.sampler.min_interval = self.sampler.min_interval, 0.0
        try:
            return await self.scrape()
        finally:
            self.sampler.min_interval = interval


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


@asynccontextmanager
async def served(url: str, webhook: WebhookSettings | None = None) -> AsyncIterator[Served]:
    """The service on a reviewer's login of the database at `url`; the owner's store and tool
    ledger beside it (the workers' side), and an auditor's token."""
    async with await Database.connect(url) as owner:
        ring = await KeyRing.open(
            owner, LocalKek(TEST_KEK), reviewer_kek=LocalKek(TEST_REVIEWER_KEK)
        )
        auditor = await token_for(owner, unique("prom"), scope="auditor")
        async with temporary_login(url, "signoff_reviewer") as login:
            settings = Settings(
                database_url=login,
                kek=LocalKek(TEST_KEK),
                reviewer_kek=LocalKek(TEST_REVIEWER_KEK),
                webhook=webhook,
            )
            service = await open_service(settings, pool_size=3)
            store = ApprovalStore(owner, ring, poll_interval=0.05)
            ledger = ToolLedger(owner, ring, lease_seconds=1.0, poll_interval=0.05)
            try:
                async with (
                    running(service) as (_, port),
                    httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=GUARD) as http,
                ):
                    yield Served(http, service, owner, store, ledger, auditor)
            finally:
                await ledger.close()
                await store.close()
                await service.close()


async def test_the_gauges_show_what_the_database_holds(fresh_database_url: str) -> None:
    # Nothing listens on the port: every attempt fails, and the retry is an hour away.
    webhook = WebhookSettings(
        url=f"http://127.0.0.1:{free_port()}/hook", secret="s" * 32, first_retry_seconds=3600
    )
    async with served(fresh_database_url, webhook) as s:
        empty = await s.fresh()
        assert value(empty, "signoff_approvals_pending") == 0
        assert value(empty, "signoff_approvals_pending_oldest_seconds") == 0
        assert value(empty, "signoff_calls_outcome_unknown") == 0
        assert value(empty, "signoff_calls_outcome_unknown_oldest_seconds") == 0
        assert value(empty, "signoff_deliveries_pending", channel="webhook") == 0
        assert value(empty, "signoff_delivery_failed_attempts", channel="webhook") == 0

        refunds = ApprovalPolicy(approvers=frozenset({"rita"}))
        await ask_tool(s.store, "refund", refunds)
        await ask_tool(s.store, "wire", refunds)
        await s.ledger.execute(ToolCall(unique("gauge"), "c1", "lookup", {}), done)
        await outcome_unknown(s.ledger, "refund")

        async def delivered_to_nobody() -> bool:
            samples = await s.fresh()
            failed = value(samples, "signoff_delivery_failed_attempts", channel="webhook")
            return failed == 3  # the two requests and the outcome_unknown call

        await until(delivered_to_nobody, GUARD, "three failed webhook attempts")
        samples = await s.fresh()
        assert value(samples, "signoff_approvals_pending") == 2
        assert value(samples, "signoff_approvals_pending_by_tool", tool="refund") == 1
        assert value(samples, "signoff_approvals_pending_by_tool", tool="wire") == 1
        oldest = value(samples, "signoff_approvals_pending_oldest_seconds")
        assert oldest is not None and oldest > 0
        by_tool = value(samples, "signoff_approvals_pending_by_tool_oldest_seconds", tool="refund")
        assert by_tool is not None and 0 < by_tool <= oldest
        assert value(samples, "signoff_calls_outcome_unknown") == 1
        unknown_for = value(samples, "signoff_calls_outcome_unknown_oldest_seconds")
        assert unknown_for is not None and unknown_for > 0
        recent = "signoff_tool_calls_recent"
        assert value(samples, recent, tool="lookup", status="succeeded") == 1
        assert value(samples, recent, tool="refund", status="outcome_unknown") == 1
        assert value(samples, "signoff_deliveries_pending", channel="webhook") == 3
        waited = value(samples, "signoff_deliveries_pending_oldest_seconds", channel="webhook")
        assert waited is not None and waited > 0
        assert value(samples, "signoff_deliveries_given_up", channel="webhook") == 0

        async with s.owner.connection() as conn:
            keys = await conn.fetch(
                "SELECT key_id, purpose, sealed FROM data_keys"
                " WHERE state = 'active' AND purpose IN ('checkpoint', 'result')"
            )
        assert {k["purpose"] for k in keys} == {"checkpoint", "result"}
        shown = {
            (dict(labels)["key_id"], dict(labels)["purpose"]): left
            for (name, labels), left in samples.items()
            if name == "signoff_key_nonces_left"
        }
        assert shown == {(k["key_id"], k["purpose"]): BUDGET - k["sealed"] for k in keys}
        assert min(shown.values()) < BUDGET  # the calls' results were sealed

        # A reviewer's token reads none of it.
        reviewer = await s.client.get("/metrics", headers=await token_for(s.owner, "rita"))
        assert reviewer.status_code == 403 and reviewer.json()["error"] == "forbidden"
        assert "signoff_key_nonces_left" not in reviewer.text


async def test_a_scrape_between_samples_gets_the_last_and_a_failed_one_keeps_it(
    fresh_database_url: str,
) -> None:
    async with served(fresh_database_url) as s:
        s.sampler.min_interval = 3600.0
        first = await s.scrape()
        assert value(first, "signoff_approvals_pending") == 0
        policy = ApprovalPolicy(approvers=frozenset({"rita"}))
        await ask_tool(s.store, "refund", policy)
        cached = await s.scrape()  # within the interval: the database is not read again
        assert value(cached, "signoff_approvals_pending") == 0
        assert value(await s.fresh(), "signoff_approvals_pending") == 1

        # The service's login may no longer read approvals: the sample fails, the scrape
        # answers with the values it had, and counts the failure.
        async with s.owner.connection() as conn:
            await conn.execute("REVOKE SELECT ON approvals FROM signoff_reviewer")
        try:
            await ask_tool(s.store, "refund", policy)
            kept = await s.fresh()
            assert value(kept, "signoff_approvals_pending") == 1
            assert value(kept, "signoff_gauge_sample_failures_total") == 1
        finally:
            async with s.owner.connection() as conn:
                await conn.execute("GRANT SELECT ON approvals TO signoff_reviewer")
        again = await s.fresh()
        assert value(again, "signoff_approvals_pending") == 2
        assert value(again, "signoff_gauge_sample_failures_total") == 1


async def test_the_wait_is_observed_once_a_decision_makes_an_approval_final(
    fresh_database_url: str,
) -> None:
    async with served(fresh_database_url) as s:
        ann, bob, cas, dee = (unique(n) for n in ("ann", "bob", "cas", "dee"))
        await ReviewerDirectory(s.owner).add(dee, [], by="admin")
        tokens = {who: await token_for(s.owner, who) for who in (ann, bob, cas, dee)}
        quorum = await ask_tool(
            s.store, "wire", ApprovalPolicy(approvers=frozenset({ann, bob}), quorum=2)
        )
        four_eyes = await ask_tool(s.store, "refund", ApprovalPolicy(approvers=frozenset({cas})))
        self_confirm = await ask_tool(s.store, "lookup", ApprovalPolicy())

        async def decide(approval_id: str, who: str) -> None:
            response = await s.client.post(
                f"/v1/approvals/{approval_id}/decision",
                headers={**tokens[who], "Idempotency-Key": uuid.uuid4().hex},
                json={"decision": "approve"},
            )
            assert response.status_code == 200, response.text

        def waits(samples: Samples, tier: str, tool: str) -> float | None:
            labels = {"tier": tier, "tool": tool}
            return value(samples, "signoff_approval_wait_seconds_count", **labels)

        await decide(quorum, ann)  # one vote of two: not final
        assert waits(await s.scrape(), "quorum", "wire") is None
        await decide(quorum, bob)
        await decide(four_eyes, cas)
        await decide(self_confirm, dee)  # a reviewer the directory lists may decide it too
        samples = await s.scrape()
        assert waits(samples, "quorum", "wire") == 1
        assert waits(samples, "four_eyes", "refund") == 1
        assert waits(samples, "self_confirm", "lookup") == 1
        total = value(samples, "signoff_approval_wait_seconds_sum", tier="quorum", tool="wire")
        assert total is not None and 0 < total < GUARD
        inf = {"tier": "quorum", "tool": "wire", "le": "+Inf"}
        assert value(samples, "signoff_approval_wait_seconds_bucket", **inf) == 1


async def test_group_sizes_reach_the_histogram_while_the_service_is_served(
    fresh_database_url: str,
) -> None:
    # Groups hold at most 4 steps; 8 is this test's alone, whatever else this process sends.
    def eights(samples: Samples) -> float:
        name = "signoff_group_commit_steps_bucket"
        return (value(samples, name, le="8.0") or 0.0) - (value(samples, name, le="4.0") or 0.0)

    async with served(fresh_database_url) as s:
        before = eights(await s.scrape())
        group_sizes.sent(8)
        assert eights(await s.scrape()) == before + 1
    registry = s.service.metrics.registry
    stopped = registry.get_sample_value("signoff_group_commit_steps_bucket", {"le": "8.0"})
    group_sizes.sent(8)  # no longer served: no longer listened to
    assert registry.get_sample_value("signoff_group_commit_steps_bucket", {"le": "8.0"}) == stopped


def test_a_listener_that_raises_stops_neither_the_others_nor_the_sender() -> None:
    heard: list[int] = []

    def broken(steps: int) -> None:
        raise RuntimeError("broken listener")

    stop_broken = group_sizes.listen(broken)
    stop_heard = group_sizes.listen(heard.append)
    try:
        group_sizes.sent(3)
        assert heard == [3]
    finally:
        stop_broken()
        stop_heard()
    stop_heard()  # a second time does nothing
    group_sizes.sent(2)
    assert heard == [3]


def test_only_the_busiest_tools_keep_their_names() -> None:
    weights = {f"tool{i}": i for i in range(1, 6)}
    assert tool_labels(weights, most=3) == {
        "tool5": "tool5",
        "tool4": "tool4",
        "tool3": "tool3",
        "tool2": OTHER_TOOL,
        "tool1": OTHER_TOOL,
    }
    # Ties go by name, so the same tools are named from one sample to the next.
    assert tool_labels({"b": 1, "a": 1, "c": 1}, most=2) == {"a": "a", "b": "b", "c": OTHER_TOOL}
    assert tool_labels({}, most=2) == {}
