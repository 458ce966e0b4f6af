"""`GET /metrics` and the limit on refused credentials, over real HTTP: uvicorn in this process
on a free loopback port, its database login one that has only `signoff_reviewer`."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from adapters.http.limits import FailureLimit, FailureLimiter, client_key
from adapters.http.server import running
from adapters.http.service import open_service
from approvals import ApprovalStore, ReviewerDirectory
from ledger.journal import Journal
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.logins import temporary_login
from ledger.store.settings import Settings

from .support.http import ask, bearer, token_for, unique
from .support.processes import TEST_KEK, TEST_REVIEWER_KEK

GUARD = 60  # seconds before a stuck step fails instead of hanging

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@asynccontextmanager
async def served(database_url: str, limit: FailureLimit) -> AsyncIterator[httpx.AsyncClient]:
    async with temporary_login(database_url, "signoff_reviewer") as url:
        settings = Settings(
            database_url=url, kek=LocalKek(TEST_KEK), reviewer_kek=LocalKek(TEST_REVIEWER_KEK)
        )
        service = await open_service(settings, pool_size=3, failure_limit=limit)
        try:
            async with (
                running(service) as (_, port),
                httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=GUARD) as client,
            ):
                yield client
        finally:
            await service.close()


@pytest.fixture(scope="module")
async def client(database_url: str, ring: KeyRing) -> AsyncIterator[httpx.AsyncClient]:
    async with served(database_url, FailureLimit()) as client:
        yield client


@pytest.fixture(scope="module")
async def auditor(db: Database) -> dict[str, str]:
    return await token_for(db, unique("prom"), scope="auditor")


async def scrape(client: httpx.AsyncClient, headers: dict[str, str]) -> Samples:
    response = await client.get("/metrics", headers=headers)
    assert response.status_code == 200, response.text
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


@dataclass
class Reviewers:
    group: str
    member: dict[str, str]
    outsider: dict[str, str]


async def reviewers(db: Database) -> Reviewers:
    group, member = unique("leads"), unique("ann")
    await ReviewerDirectory(db).add(member, [group], by="admin")
    return Reviewers(group, await token_for(db, member), await token_for(db, unique("bob")))


async def test_metrics_need_an_auditor_s_token(
    client: httpx.AsyncClient, db: Database, auditor: dict[str, str]
) -> None:
    anonymous = await client.get("/metrics")
    assert anonymous.status_code == 401 and anonymous.json()["error"] == "unauthenticated"
    assert anonymous.headers["www-authenticate"].startswith("Bearer")
    reviewer = await client.get("/metrics", headers=await token_for(db, unique("rita")))
    assert reviewer.status_code == 403 and reviewer.json()["error"] == "forbidden"
    scraped = await client.get("/metrics", headers=auditor)
    assert scraped.status_code == 200
    assert scraped.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert "# TYPE signoff_http_requests_total counter" in scraped.text


async def test_requests_are_counted_by_route_template_never_the_raw_path(
    client: httpx.AsyncClient, db: Database, store: ApprovalStore, auditor: dict[str, str]
) -> None:
    who = unique("rex")
    approval_id = await ask(store, who)
    template = "/v1/approvals/{approval_id}"
    before = await scrape(client, auditor)
    for _ in range(2):
        shown = await client.get(f"/v1/approvals/{approval_id}", headers=await token_for(db, who))
        assert shown.status_code == 200
    stray = f"/nothing/{uuid.uuid4().hex}"
    assert (await client.get(stray)).status_code == 404
    after = await scrape(client, auditor)
    labels = {"method": "GET", "route": template, "status": "200"}
    assert value(after, "signoff_http_requests_total", **labels) == (
        value(before, "signoff_http_requests_total", **labels) + 2
    )
    timed = {"method": "GET", "route": template}
    assert value(after, "signoff_http_request_duration_seconds_count", **timed) >= 2
    unmatched = {"method": "GET", "route": "unrouted", "status": "404"}
    assert value(after, "signoff_http_requests_total", **unmatched) >= 1
    text = (await client.get("/metrics", headers=auditor)).text
    assert approval_id not in text and stray not in text


async def test_a_decision_is_counted_once_and_a_replay_or_a_refusal_not_at_all(
    client: httpx.AsyncClient, db: Database, store: ApprovalStore, auditor: dict[str, str]
) -> None:
    people = await reviewers(db)
    url = f"/v1/approvals/{await ask(store, f'group:{people.group}')}/decision"
    body = {"decision": "approve", "request_id": uuid.uuid4().hex}

    async def approvals_counted() -> float:
        return value(await scrape(client, auditor), "signoff_decisions_total", decision="approve")

    start = await approvals_counted()
    refused = await client.post(url, headers=people.outsider, json=body)
    assert refused.status_code == 403, refused.text
    assert await approvals_counted() == start
    decided = await client.post(url, headers=people.member, json=body)
    assert decided.status_code == 200, decided.text
    assert await approvals_counted() == start + 1
    replayed = await client.post(url, headers=people.member, json=body)
    assert replayed.status_code == 200 and replayed.headers["idempotent-replayed"] == "true"
    late = await client.post(
        url, headers=people.member, json={"decision": "approve", "request_id": "another"}
    )
    assert late.status_code == 409, late.text
    assert await approvals_counted() == start + 1


class Stream:
    """An event stream's `data` lines, as they come (enough to wait for one approval)."""

    def __init__(self, response: httpx.Response) -> None:
        self.lines = response.aiter_lines()

    async def until(self, *words: str) -> None:
        """Read up to a `data` line holding every one of `words`."""

        async def read() -> None:
            async for line in self.lines:
                if line.startswith("data:") and all(w in line for w in words):
                    return
            raise AssertionError("the stream ended")

        await asyncio.wait_for(read(), GUARD)


@asynccontextmanager
async def streaming(
    client: httpx.AsyncClient, headers: dict[str, str], since: int | None = None
) -> AsyncIterator[Stream]:
    params = {} if since is None else {"since": since}
    async with client.stream(
        "GET", "/v1/approvals/events", headers=headers, params=params
    ) as response:
        assert response.status_code == 200
        yield Stream(response)


async def test_the_feed_delay_has_a_sample_once_a_decision_is_streamed_live(
    client: httpx.AsyncClient,
    db: Database,
    store: ApprovalStore,
    journal: Journal,
    auditor: dict[str, str],
) -> None:
    who = unique("fay")
    headers = await token_for(db, who)
    async with streaming(client, auditor) as stream:
        # The first request seen proves the stream listens: the decision cannot be missed.
        approval_id = await ask(store, who)
        await stream.until(approval_id, '"status":"pending"')
        before = await scrape(client, auditor)
        decided = await client.post(
            f"/v1/approvals/{approval_id}/decision",
            headers={**headers, "Idempotency-Key": uuid.uuid4().hex},
            json={"decision": "approve"},
        )
        assert decided.status_code == 200, decided.text
        # Its journal event, with its position (an `approval.changed` may come ahead of it).
        await stream.until(approval_id, '"event":"approval.decided"')
    after = await scrape(client, auditor)
    count = value(after, "signoff_feed_delay_seconds_count") - value(
        before, "signoff_feed_delay_seconds_count"
    )
    assert count >= 1
    late = value(after, "signoff_feed_delay_seconds_sum") - value(
        before, "signoff_feed_delay_seconds_sum"
    )
    assert 0 <= late < GUARD
    # A stream that resumes reads its backlog first: those events were not waited for.
    start = await journal.last_position()
    earlier = await ask(store, who)
    decided = await client.post(
        f"/v1/approvals/{earlier}/decision",
        headers={**headers, "Idempotency-Key": uuid.uuid4().hex},
        json={"decision": "reject"},
    )
    assert decided.status_code == 200, decided.text
    await readable(journal, start, earlier)  # the stream's first read then holds it
    async with streaming(client, auditor, since=start) as backlog:
        await backlog.until(earlier, '"event":"approval.decided"')
    again = await scrape(client, auditor)
    assert value(again, "signoff_feed_delay_seconds_count") == value(
        after, "signoff_feed_delay_seconds_count"
    )


async def readable(journal: Journal, after: int, approval_id: str) -> None:
    """Wait until the journal reads `approval_id`'s decision after `after` (a transaction open
    elsewhere on the server may hold its horizon back a while)."""

    async def decided() -> bool:
        async for e in journal.read_all(after=after):
            if e.stream_id == f"approval:{approval_id}" and e.type == "approval.decided":
                return True
        return False

    async with asyncio.timeout(GUARD):
        while not await decided():  # noqa: ASYNC110 (the journal has no event to wait on)
            await asyncio.sleep(0.05)


async def test_refused_credentials_from_one_address_are_throttled(
    database_url: str, ring: KeyRing, db: Database
) -> None:
    # 10 refusals, then one back every 2 s: the eleventh request is well inside the window.
    async with served(database_url, FailureLimit(failures=10, per_seconds=20.0)) as client:
        good = await token_for(db, unique("gus"))
        auditor = await token_for(db, unique("prom"), scope="auditor")
        guesses = [f"sgf_{uuid.uuid4().hex}", "not-a-token", "a.b.c", "sgfdev_x"]
        for i in range(10):
            refused = await client.get("/v1/approvals", headers=bearer(guesses[i % 4]))
            assert refused.status_code == 401, (i, refused.text)
        limited = await client.get("/v1/approvals", headers=bearer(guesses[0]))
        assert limited.status_code == 429, limited.text
        assert limited.json()["error"] == "rate_limited"
        wait = int(limited.headers["retry-after"])
        assert 1 <= wait <= 2
        # A good token is not even checked now; no credential at all is still 401.
        assert (await client.get("/v1/approvals", headers=good)).status_code == 429
        assert (await client.get("/metrics", headers=auditor)).status_code == 429
        assert (await client.get("/v1/approvals")).status_code == 401
        await asyncio.sleep(wait)  # what is tested: the window the server named has passed
        assert (await client.get("/v1/approvals", headers=good)).status_code == 200
        # Successes spend nothing: a good token again and again stays 200.
        for _ in range(3):
            assert (await client.get("/v1/approvals", headers=good)).status_code == 200
        samples = await scrape(client, auditor)
        assert value(samples, "signoff_auth_failures_total") == 10
        assert value(samples, "signoff_rate_limited_total") == 3
        limited_count = value(
            samples, "signoff_http_requests_total", method="GET", route="/metrics", status="429"
        )
        assert limited_count == 1


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_bucket_refills_at_its_rate_and_forgets_the_oldest_when_full() -> None:
    clock = Clock()
    limiter = FailureLimiter(FailureLimit(failures=2, per_seconds=10.0), clock=clock)
    assert limiter.retry_after("a") is None
    limiter.failed("a")
    assert limiter.retry_after("a") is None
    limiter.failed("a")
    assert limiter.retry_after("a") == pytest.approx(5.0)
    clock.now = 4.0
    assert limiter.retry_after("a") == pytest.approx(1.0)
    assert limiter.retry_after("b") is None  # another address is another bucket
    clock.now = 5.0
    assert limiter.retry_after("a") is None
    off = FailureLimiter(FailureLimit(failures=0), clock=clock)
    for _ in range(5):
        off.failed("a")
    assert off.retry_after("a") is None
    small = FailureLimiter(FailureLimit(failures=1), clock=clock, max_addresses=2)
    for key in ("x", "y", "z"):
        small.failed(key)
    assert small.retry_after("x") is None and small.retry_after("z") is not None


def test_an_ipv6_client_is_limited_by_its_64() -> None:
    assert client_key("2001:db8:1:2:aaaa::1") == client_key("2001:db8:1:2:bbbb::2")
    assert client_key("2001:db8:1:2::1") != client_key("2001:db8:1:3::1")
    assert client_key("::ffff:192.0.2.7") == client_key("192.0.2.7") == "192.0.2.7"
    assert client_key(None) == "unknown"
