"""The live stream, `GET /v1/approvals/events`, over real HTTP: two servers (two uvicorn
servers on two ports, each with its own login and pool, one database) are one service, so a
decision made through one reaches the other's streams; each caller sees only the approvals it
may see; `Last-Event-ID` resumes after an event."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from adapters.http.server import running
from adapters.http.service import Service, open_service
from approvals import ApprovalStore, ReviewerDirectory
from ledger.journal import Journal
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.logins import temporary_login
from ledger.store.settings import Settings

from .support.http import ask, token_for, unique
from .support.processes import ROOT, TEST_KEK, TEST_REVIEWER_KEK, kek_env

GUARD = 60  # seconds before a stuck step fails instead of hanging; nothing here is timed


@dataclass
class Replicas:
    a: httpx.AsyncClient
    b: httpx.AsyncClient
    services: list[Service]


@pytest.fixture(scope="module")
async def replicas(database_url: str, ring: KeyRing) -> AsyncIterator[Replicas]:
    async with AsyncExitStack() as stack:
        clients, services = [], []
        for _ in range(2):
            url = await stack.enter_async_context(temporary_login(database_url, "signoff_reviewer"))
            settings = Settings(
                database_url=url, kek=LocalKek(TEST_KEK), reviewer_kek=LocalKek(TEST_REVIEWER_KEK)
            )
            service = await open_service(settings, pool_size=3)
            services.append(service)
            stack.push_async_callback(service.close)
            _, port = await stack.enter_async_context(running(service))
            client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=GUARD)
            stack.push_async_callback(client.aclose)
            clients.append(client)
        yield Replicas(clients[0], clients[1], services)


@dataclass
class Frame:
    id: str | None = None
    event: str | None = None
    data: list[str] = field(default_factory=list)

    @property
    def json(self) -> Any:
        return json.loads("\n".join(self.data))


class Stream:
    """One SSE response, read frame by frame; comments (keepalives) and `retry` skipped."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.lines = response.aiter_lines()

    async def next(self) -> Frame:
        return await asyncio.wait_for(self._next(), GUARD)

    async def _next(self) -> Frame:
        frame = Frame()
        async for line in self.lines:
            if line == "":
                if frame.data:
                    return frame
                frame = Frame()
            elif not line.startswith(":"):
                name, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if name == "id":
                    frame.id = value
                elif name == "event":
                    frame.event = value
                elif name == "data":
                    frame.data.append(value)
        raise AssertionError("the stream ended")

    async def until(self, approval_id: str, status: str) -> list[Frame]:
        """Frames up to the first of `approval_id` with `status` (that one last)."""
        seen = []
        while True:
            frame = await self.next()
            seen.append(frame)
            approval = frame.json["approval"]
            if approval["approval_id"] == approval_id and approval["status"] == status:
                return seen


@asynccontextmanager
async def streaming(
    client: httpx.AsyncClient, headers: dict[str, str], since: int | str | None = None
) -> AsyncIterator[Stream]:
    wanted = {**headers, **({} if since is None else {"Last-Event-ID": str(since)})}
    async with client.stream("GET", "/v1/approvals/events", headers=wanted) as response:
        assert response.status_code == 200, (await response.aread()).decode()
        assert response.headers["content-type"].startswith("text/event-stream")
        yield Stream(response)


async def test_a_decision_through_one_server_reaches_the_other_s_stream(
    replicas: Replicas, db: Database, store: ApprovalStore, journal: Journal
) -> None:
    group, member, outsider = unique("leads"), unique("ann"), unique("bob")
    await ReviewerDirectory(db).add(member, [group], by="admin")
    ann, bob = await token_for(db, member), await token_for(db, outsider)
    auditor = await token_for(db, unique("aud"), scope="auditor")
    # From a position before the request: nothing after it can be missed, however late the
    # streams start reading.
    start = await journal.last_position()
    approval_id = await ask(store, f"group:{group}")
    async with (
        streaming(replicas.b, ann, since=start) as on_b,
        streaming(replicas.b, auditor, since=start) as audited,
        streaming(replicas.b, bob, since=start) as outside,
    ):
        requested = (await on_b.until(approval_id, "pending"))[-1]
        assert requested.json["approval"]["hitl"]["action_requests"][0]["name"] == "refund"
        assert "args" not in requested.json["approval"]

        decided = await replicas.a.post(
            f"/v1/approvals/{approval_id}/decision",
            headers={**ann, "Idempotency-Key": uuid.uuid4().hex},
            json={"type": "accept"},
        )
        assert decided.status_code == 200, decided.text
        last = (await on_b.until(approval_id, "approved"))[-1]
        assert last.event in ("approval.decided", "approval.changed")
        assert last.json["approval"]["decided_by"] == [member]
        assert (await audited.until(approval_id, "approved"))[-1].json["approval_id"] == approval_id

        # Bob may not see it: his stream passes it by. An approval of his, asked after, comes
        # later in the journal; every frame before it is of other approvals.
        mine = await ask(store, outsider)
        before = await outside.until(mine, "pending")
        assert all(f.json["approval_id"] != approval_id for f in before)


async def test_last_event_id_resumes_after_that_event(
    replicas: Replicas, db: Database, store: ApprovalStore, journal: Journal
) -> None:
    who = unique("cleo")
    headers = await token_for(db, who)
    start = await journal.last_position()
    approval_id = await ask(store, who)
    await replicas.a.post(
        f"/v1/approvals/{approval_id}/decision",
        headers={**headers, "Idempotency-Key": uuid.uuid4().hex},
        json={"decision": "reject", "reason": "no"},
    )
    events = await journal.read_stream(f"approval:{approval_id}")
    requested, rejected = events[0], events[-1]
    async with streaming(replicas.a, headers, since=start) as first:
        frames = await first.until(approval_id, "rejected")
    mine = [f for f in frames if f.json["approval_id"] == approval_id and f.id is not None]
    assert [f.event for f in mine][:1] == ["approval.requested"]
    assert mine[0].id == str(requested.position)
    # Reconnecting to the other server with the requested event's id: the decision, not the
    # request again.
    async with streaming(replicas.b, headers, since=requested.position) as resumed:
        frame = await resumed.next()
        while frame.json["approval_id"] != approval_id:
            frame = await resumed.next()
    assert frame.event == "approval.decided" and frame.id == str(rejected.position)


async def test_a_stream_needs_a_token_and_a_real_event_id(
    replicas: Replicas, db: Database, journal: Journal
) -> None:
    assert (await replicas.a.get("/v1/approvals/events")).status_code == 401
    headers = await token_for(db, unique("dora"))
    beyond = await journal.last_position() + 10**9
    for since in ("forged", "-1", str(beyond)):
        refused = await replicas.a.get(
            "/v1/approvals/events", headers={**headers, "Last-Event-ID": since}
        )
        assert refused.status_code == 422, (since, refused.text)


async def test_an_idle_stream_gets_keepalives_and_ends_for_the_client_to_reconnect(
    replicas: Replicas, db: Database
) -> None:
    headers = await token_for(db, unique("erin"))
    service = replicas.services[0]
    keepalive, lifetime = service.keepalive_seconds, service.stream_seconds
    service.keepalive_seconds, service.stream_seconds = 0.05, 0.5
    try:
        async with replicas.a.stream("GET", "/v1/approvals/events", headers=headers) as response:
            lines = await asyncio.wait_for(_all_lines(response), GUARD)  # until it ends
    finally:
        service.keepalive_seconds, service.stream_seconds = keepalive, lifetime
    assert lines[0] == "retry: 1000"
    assert ": keepalive" in lines


async def _all_lines(response: httpx.Response) -> list[str]:
    return [line async for line in response.aiter_lines()]


async def test_a_stopping_server_ends_its_streams_itself(database_url: str, db: Database) -> None:
    """`signoff serve` as a real process, a client's stream open: stopped as a service manager
    stops it (SIGTERM), the server ends the stream whole (the client reads its end, no cut
    connection), logs no traceback, and exits without waiting out its shutdown timeout."""
    headers = await token_for(db, unique("fay"))
    env = {**kek_env(), "PYTHONPATH": str(ROOT), "SIGNOFF_DATABASE_URL": database_url}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "adapters.cli", "serve", "--port", "0", "--json",
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    assert process.stdout is not None and process.stderr is not None
    try:
        line = await asyncio.wait_for(process.stdout.readline(), GUARD)
        assert line, (await process.stderr.read()).decode()
        url = json.loads(line)["url"]
        async with (
            httpx.AsyncClient(base_url=url, timeout=GUARD) as client,
            client.stream("GET", "/v1/approvals/events", headers=headers) as response,
        ):
            assert response.status_code == 200
            lines = response.aiter_lines()
            assert await asyncio.wait_for(anext(lines), GUARD) == "retry: 1000"
            process.send_signal(signal.SIGTERM)
            # A stream cut mid-response raises here (httpx: an incomplete chunked body).
            await asyncio.wait_for(_rest(lines), GUARD)
        _, stderr = await asyncio.wait_for(process.communicate(), GUARD)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    said = stderr.decode()
    assert "Traceback" not in said and "Exception in ASGI application" not in said, said
    assert "timeout graceful shutdown exceeded" not in said, said


async def _rest(lines: AsyncIterator[str]) -> list[str]:
    return [line async for line in lines]


async def test_a_service_served_again_after_a_stop_streams_again(
    database_url: str, db: Database, store: ApprovalStore, journal: Journal
) -> None:
    """`running` stopped once (its streams ended then) and started again on the same service:
    a stream of the new server carries what happens, as the first one's did."""
    member = unique("gus")
    headers = await token_for(db, member)
    async with temporary_login(database_url, "signoff_reviewer") as url:
        settings = Settings(
            database_url=url, kek=LocalKek(TEST_KEK), reviewer_kek=LocalKek(TEST_REVIEWER_KEK)
        )
        service = await open_service(settings, pool_size=3)
        try:
            async with running(service):
                pass
            async with (
                running(service) as (_, port),
                httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=GUARD) as client,
            ):
                start = await journal.last_position()
                approval_id = await ask(store, member)
                async with streaming(client, headers, since=start) as stream:
                    assert (await stream.until(approval_id, "pending"))[-1].json
        finally:
            await service.close()
