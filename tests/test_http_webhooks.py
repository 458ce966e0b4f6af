"""Webhook notifications of `signoff serve`, posted to a real HTTP receiver on a loopback port:
the service's login has only `signoff_reviewer`, the calls are made by a worker whose login
has only `signoff_app`, and the signatures are checked here with hashlib's HMAC."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest

from adapters.http.service import Service, open_service
from adapters.http.webhook_bodies import signature_header, verify_signature
from adapters.http.webhooks import Webhooks
from approvals import ApprovalStore
from ledger.calls.model import CallContext, CallStatus, ToolCall
from ledger.calls.service import ToolLedger
from ledger.errors import ConfigurationError
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.logins import temporary_login
from ledger.store.settings import Settings, WebhookSettings

from .support.activity import finished
from .support.http import ask, token_for, unique
from .support.processes import ROOT, TEST_KEK, TEST_REVIEWER_KEK, kek_env
from .support.replicas import serve_replicas
from .support.service_load import dies_running
from .support.until import until

SECRET = "whsec-test-0123456789abcdef"


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """A webhook receiver that records every request and answers with `statuses` in turn
    (then 200), after `delays` in turn (then at once)."""

    url: str
    statuses: list[int] = field(default_factory=list)
    delays: list[float] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)

    def of(self, predicate: Callable[[Any], bool]) -> list[Received]:
        return [r for r in self.received if predicate(r.json)]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    lock = threading.Lock()
    state = Receiver(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with lock:
                state.received.append(Received(dict(self.headers.items()), body))
                status = state.statuses.pop(0) if state.statuses else 200
                delay = state.delays.pop(0) if state.delays else 0.0
            time.sleep(delay)
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    # a path of its own: a later test's receiver may be given this one's port, and the
    # deliveries are looked up by target
    port = server.server_address[1]
    state.url = f"http://127.0.0.1:{port}/hooks/signoff/{unique('receiver')}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
async def reviewer_url(database_url: str, ring: KeyRing) -> AsyncIterator[str]:
    async with temporary_login(database_url, "signoff_reviewer") as url:
        yield url


@asynccontextmanager
async def webhook_service(reviewer_url: str, webhook: WebhookSettings) -> AsyncIterator[Service]:
    settings = Settings(
        database_url=reviewer_url,
        kek=LocalKek(TEST_KEK),
        reviewer_kek=LocalKek(TEST_REVIEWER_KEK),
        webhook=webhook,
    )
    service = await open_service(settings, pool_size=3)
    try:
        yield service
    finally:
        await service.close()


def hook(receiver: Receiver, **options: Any) -> WebhookSettings:
    return WebhookSettings(receiver.url, SECRET, first_retry_seconds=0.05, **options)


def for_approval(approval_id: str) -> Callable[[Any], bool]:
    return lambda body: body.get("approval", {}).get("approval_id") == approval_id


async def all_recorded(db: Database, receiver: Receiver, count: int) -> None:
    """Return once `count` deliveries to the receiver have their last attempt recorded: a post
    is recorded after its answer, so every post counted there has been received."""

    async def recorded() -> bool:
        rows = await delivery_rows(db, receiver.url)
        return len(rows) == count and all(r["delivered_at"] is not None for r in rows)

    await until(recorded, what=f"{count} deliveries recorded")


async def later_passes(store: ApprovalStore, receiver: Receiver) -> None:
    """Return once the service has finished a pass that began after every post received so
    far: a delivery that was still due would have been posted again by then. Each new request
    is recorded by a pass after the one that posted the request before it, and passes run one
    after the other, so two of them in turn are enough."""
    for _ in range(2):
        posted = for_approval(await ask(store, "alice"))
        await until(lambda: bool(receiver.of(posted)), what="a later pass")  # noqa: B023


async def delivery_rows(db: Database, target: str) -> list[asyncpg.Record]:
    async with db.connection() as conn:
        rows: list[asyncpg.Record] = await conn.fetch(
            "SELECT * FROM webhook_deliveries WHERE target = $1 ORDER BY delivery_id", target
        )
    return rows


async def row_of(db: Database, receiver: Receiver, approval_id: str) -> asyncpg.Record:
    """The one delivery row of the posts the receiver got for `approval_id`."""
    [delivery] = {r.headers["X-Signoff-Delivery"] for r in receiver.of(for_approval(approval_id))}
    rows = await delivery_rows(db, receiver.url)
    [row] = [r for r in rows if r["delivery_id"] == int(delivery)]
    return row


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def hmac_ok(received: Received) -> bool:
    """The signature checked by hand, as a receiver in any language would."""
    fields = dict(part.split("=", 1) for part in received.headers["X-Signoff-Signature"].split(","))
    signed = fields["t"].encode() + b"." + received.body
    expected = hmac.new(SECRET.encode(), signed, hashlib.sha256).hexdigest()
    return hmac.compare_digest(fields["v1"], expected) and abs(time.time() - int(fields["t"])) < 60


async def test_a_new_approval_reaches_the_receiver_once_signed_and_without_arguments(
    reviewer_url: str, receiver: Receiver, store: ApprovalStore, db: Database
) -> None:
    async with webhook_service(reviewer_url, hook(receiver)):
        approval_id = await ask(store, "alice")
        await until(lambda: bool(receiver.of(for_approval(approval_id))))
        await later_passes(store, receiver)  # nothing is sent again
    [got] = receiver.of(for_approval(approval_id))
    assert hmac_ok(got)
    assert got.headers["Content-Type"] == "application/json"
    body = got.json
    assert body["type"] == "approval.requested"
    assert got.headers["X-Signoff-Delivery"] == str(body["id"])
    assert body["approval"]["status"] == "pending" and body["approval"]["tool"] == "refund"
    assert "args" not in body["approval"]
    assert body["approval"]["hitl"]["action_requests"][0]["args"] is None
    # The arguments in clear: their key (their digits a digest or a time may hold by chance).
    assert b'"amount"' not in got.body
    [row] = [r for r in await delivery_rows(db, receiver.url) if r["delivery_id"] == body["id"]]
    assert (row["position"], row["kind"], row["attempts"]) == (
        body["position"],
        "approval.requested",
        1,
    )
    assert row["delivered_at"] is not None and row["last_status"] == 200
    assert row["next_attempt_at"] is None


async def test_a_new_request_is_delivered_when_notified_not_at_the_next_poll(
    reviewer_url: str, receiver: Receiver, store: ApprovalStore
) -> None:
    """New requests notify a channel of their own (`signoff_approval_requests`): webhooks
    listen to it, so a request is posted at once, not after a poll (here a minute)."""
    async with await Database.connect(reviewer_url, pool_size=2) as db:
        ring = await KeyRing.open(
            db, LocalKek(TEST_KEK), reviewer_kek=LocalKek(TEST_REVIEWER_KEK), create_missing=False
        )
        webhooks = Webhooks(db, ApprovalStore(db, ring), hook(receiver), poll_interval=60)
        await webhooks.start()
        try:
            # Its first pass is over (it claimed what was due): it sleeps until notified.
            watcher = await asyncpg.connect(reviewer_url)
            try:
                claimed = "SELECT * FROM signoff_webhook_claim("
                await until(lambda: finished(watcher, claimed), what="the first pass")
            finally:
                await watcher.close()
            await webhooks.until_listening()  # a request notified before would wait a poll
            approval_id = await ask(store, "alice")
            await until(lambda: bool(receiver.of(for_approval(approval_id))))
        finally:
            await webhooks.close()


async def test_a_failing_receiver_gets_the_third_attempt_and_the_record_shows_them(
    reviewer_url: str, receiver: Receiver, store: ApprovalStore, db: Database
) -> None:
    receiver.statuses = [503, 500]
    handler, logger = Records(), logging.getLogger("signoff")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        async with webhook_service(reviewer_url, hook(receiver)):
            approval_id = await ask(store, "alice")
            await until(lambda: len(receiver.of(for_approval(approval_id))) >= 3)
            # Logged once the third attempt is recorded: delivered, so nothing is due again.
            delivered = [("webhook delivered",)]
            await until(lambda: [(r.getMessage(),) for r in handler.records][-1:] == delivered)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    attempts = receiver.of(for_approval(approval_id))
    assert len(attempts) == 3
    assert len({a.headers["X-Signoff-Delivery"] for a in attempts}) == 1
    assert all(hmac_ok(a) for a in attempts)
    [row] = await delivery_rows(db, receiver.url)
    assert (row["attempts"], row["last_status"], row["last_error"]) == (3, 200, None)
    assert row["delivered_at"] is not None
    logged = [r for r in handler.records if r.getMessage().startswith("webhook ")]
    assert [(r.getMessage(), getattr(r, "attempt", None)) for r in logged] == [
        ("webhook attempt failed", 1),
        ("webhook attempt failed", 2),
        ("webhook delivered", 3),
    ]
    assert {getattr(r, "delivery", None) for r in logged} == {row["delivery_id"]}
    text = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in handler.records)
    for secret in (SECRET, "/hooks/signoff", "action_requests"):  # nor the body's document
        assert secret not in text


async def test_a_receiver_that_never_answers_well_is_given_up_after_the_last_attempt(
    reviewer_url: str, receiver: Receiver, store: ApprovalStore, db: Database
) -> None:
    receiver.statuses = [500] * 10
    async with webhook_service(reviewer_url, hook(receiver, max_attempts=2)):
        approval_id = await ask(store, "alice")
        await until(lambda: len(receiver.of(for_approval(approval_id))) >= 2)
        await later_passes(store, receiver)
    assert len(receiver.of(for_approval(approval_id))) == 2
    row = await row_of(db, receiver, approval_id)
    assert (row["attempts"], row["last_status"], row["last_error"]) == (2, 500, "HTTP 500")
    assert row["delivered_at"] is None and row["next_attempt_at"] is None


async def test_a_body_that_cannot_be_built_counts_as_failed_attempts_and_is_given_up(
    reviewer_url: str,
    receiver: Receiver,
    store: ApprovalStore,
    db: Database,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def unbuildable(self: Webhooks, row: asyncpg.Record) -> dict[str, Any]:
        raise ValueError("an approval this code cannot show")

    monkeypatch.setattr(Webhooks, "_body", unbuildable)
    async with webhook_service(reviewer_url, hook(receiver, max_attempts=2)):
        approval_id = await ask(store, "alice")
        deadline = time.monotonic() + 20
        while True:
            rows = [r for r in await delivery_rows(db, receiver.url) if r["attempts"] >= 2]
            if rows or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
    assert receiver.of(for_approval(approval_id)) == []
    [row] = rows
    assert (row["attempts"], row["last_error"], row["next_attempt_at"]) == (2, "ValueError", None)


async def test_a_receiver_that_answers_too_late_gets_the_delivery_again(
    reviewer_url: str, receiver: Receiver, store: ApprovalStore, db: Database
) -> None:
    receiver.delays = [1.5]
    async with webhook_service(reviewer_url, hook(receiver, timeout_seconds=0.3)):
        approval_id = await ask(store, "alice")
        await until(lambda: len(receiver.of(for_approval(approval_id))) >= 2)
        await later_passes(store, receiver)
    first, second = receiver.of(for_approval(approval_id))
    assert first.headers["X-Signoff-Delivery"] == second.headers["X-Signoff-Delivery"]
    row = await row_of(db, receiver, approval_id)
    assert (row["attempts"], row["last_status"]) == (2, 200)
    assert row["delivered_at"] is not None


async def test_a_call_that_becomes_outcome_unknown_is_delivered(
    database_url: str, reviewer_url: str, receiver: Receiver, ring: KeyRing
) -> None:
    async with temporary_login(database_url, "signoff_app") as worker_url:
        settings = Settings(database_url=worker_url, kek=LocalKek(TEST_KEK))
        db = await Database.connect(worker_url, pool_size=2, settings=settings)
        ledger = ToolLedger(
            db, await KeyRing.open(db, create_missing=False), lease_seconds=1.0, poll_interval=0.05
        )
        try:
            async with webhook_service(reviewer_url, hook(receiver)):
                call = ToolCall(unique("wh"), "c1", "refund", {"amount": 9}, turn_id="t1")
                await dies_running(ledger, call)  # its lease lapses
                await asyncio.sleep(1.2)  # what is tested: the lease lapses by the server's clock

                async def never(args: dict[str, Any], context: CallContext) -> str:
                    raise AssertionError("a write that may have happened is not repeated")

                outcome = await ledger.execute(call, never)
                assert outcome.status is CallStatus.OUTCOME_UNKNOWN

                def of_call(body: Any) -> bool:
                    return bool(body.get("call", {}).get("run_id") == call.run_id)

                await until(lambda: bool(receiver.of(of_call)))
        finally:
            await ledger.close()
            await db.close()
    [got] = receiver.of(of_call)
    assert hmac_ok(got)
    assert got.json["type"] == "call.outcome_unknown"
    assert got.json["call"] == {
        "run_id": call.run_id,
        "call_id": "c1",
        "tool": "refund",
        "status": "outcome_unknown",
    }
    assert b"amount" not in got.body


async def test_the_slack_format_has_text_and_blocks(
    reviewer_url: str, receiver: Receiver, store: ApprovalStore
) -> None:
    async with webhook_service(reviewer_url, hook(receiver, format="slack")):
        approval_id = await ask(store, "alice")
        await until(lambda: any(approval_id in r.json["text"] for r in receiver.received))
    [got] = [r for r in receiver.received if approval_id in r.json["text"]]
    assert hmac_ok(got)
    assert got.json["text"].startswith("Approval requested: refund in run ")
    assert got.json["blocks"][0]["type"] == "section"
    assert b"amount" not in got.body


async def test_two_services_on_one_database_deliver_an_approval_once(
    reviewer_url: str, receiver: Receiver, store: ApprovalStore, db: Database
) -> None:
    async with (
        webhook_service(reviewer_url, hook(receiver)),
        webhook_service(reviewer_url, hook(receiver)),
    ):
        approval_ids = [await ask(store, "alice") for _ in range(5)]
        for approval_id in approval_ids:
            await until(lambda: bool(receiver.of(for_approval(approval_id))))  # noqa: B023
        await all_recorded(db, receiver, len(approval_ids))
    for approval_id in approval_ids:
        assert len(receiver.of(for_approval(approval_id))) == 1
    rows = await delivery_rows(db, receiver.url)
    assert len(rows) == 5 and all(r["attempts"] == 1 for r in rows)


async def test_two_serve_processes_deliver_each_approval_once(
    reviewer_url: str,
    receiver: Receiver,
    store: ApprovalStore,
    db: Database,
    route: Callable[[str], str],
) -> None:
    """Two `signoff serve` processes, configured from the environment as an operator would and
    used once their `/readyz` answers 200; directly, and through a session pooler."""
    await token_for(db, unique("ops"))  # serve refuses to start with nobody to let in
    env = {
        **kek_env(),
        "PYTHONPATH": str(ROOT),
        "SIGNOFF_DATABASE_URL": route(reviewer_url),
        "SIGNOFF_WEBHOOK_URL": receiver.url,
        "SIGNOFF_WEBHOOK_SECRET": SECRET,
    }
    async with serve_replicas(env) as replicas:
        approval_ids = [await ask(store, "alice") for _ in range(6)]
        for approval_id in approval_ids:
            await until(lambda: bool(receiver.of(for_approval(approval_id))))  # noqa: B023
        await all_recorded(db, receiver, len(approval_ids))
    said = replicas.said
    for approval_id in approval_ids:
        [got] = receiver.of(for_approval(approval_id))
        assert hmac_ok(got)
    assert all(SECRET not in text and "/hooks/signoff" not in text for text in said)
    rows = await delivery_rows(db, receiver.url)
    assert len(rows) == 6 and all(r["attempts"] == 1 for r in rows)


async def test_a_signature_is_refused_for_another_body_secret_or_an_old_time() -> None:
    body, now = b'{"type":"approval.requested"}', int(time.time())
    header = signature_header(SECRET, body, now)
    assert verify_signature(SECRET, header, body)
    assert not verify_signature(SECRET, header, body + b" ")
    assert not verify_signature("another-secret-0123456789", header, body)
    assert not verify_signature(SECRET, signature_header(SECRET, body, now - 301), body)
    assert not verify_signature(SECRET, "v1=" + header.split("v1=")[1], body)


def test_webhook_settings_come_from_the_environment(tmp_path: Path) -> None:
    assert Settings.from_env({}).webhook is None
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n")
    got = Settings.from_env(
        {
            "SIGNOFF_WEBHOOK_URL": "HTTPS://hooks.example.com/services/T0/B0/xyz",
            "SIGNOFF_WEBHOOK_SECRET_FILE": str(secret_file),
            "SIGNOFF_WEBHOOK_FORMAT": "slack",
        }
    ).webhook
    assert got is not None
    assert (got.url, got.secret, got.format) == (
        "https://hooks.example.com/services/T0/B0/xyz",
        SECRET,
        "slack",
    )
    assert SECRET not in repr(got)
    refused = {
        "needs a secret": {"SIGNOFF_WEBHOOK_URL": "https://h.example/x"},
        "a short secret": {
            "SIGNOFF_WEBHOOK_URL": "https://h.example/x",
            "SIGNOFF_WEBHOOK_SECRET": "x",
        },
        "not http": {"SIGNOFF_WEBHOOK_URL": "ftp://h.example/x", "SIGNOFF_WEBHOOK_SECRET": SECRET},
        "credentials": {
            "SIGNOFF_WEBHOOK_URL": "https://u:p@h.example/x",
            "SIGNOFF_WEBHOOK_SECRET": SECRET,
        },
        "a format": {
            "SIGNOFF_WEBHOOK_URL": "https://h.example/x",
            "SIGNOFF_WEBHOOK_SECRET": SECRET,
            "SIGNOFF_WEBHOOK_FORMAT": "teams",
        },
        "no URL": {"SIGNOFF_WEBHOOK_SECRET": SECRET},
    }
    for why, environ in refused.items():
        with pytest.raises(ConfigurationError, match="SIGNOFF_WEBHOOK") as caught:
            Settings.from_env(environ)
        assert "u:p" not in str(caught.value), why


async def test_deliveries_are_written_only_through_their_functions_and_audited_by_host(
    database_url: str, reviewer_url: str, receiver: Receiver, store: ApprovalStore, db: Database
) -> None:
    async with webhook_service(reviewer_url, hook(receiver)):
        approval_id = await ask(store, "alice")
        await until(lambda: bool(receiver.of(for_approval(approval_id))))

        async def attempt_recorded() -> bool:  # the receiver answers before it is recorded
            return [r["attempts"] for r in await delivery_rows(db, receiver.url)] == [1]

        await until(attempt_recorded, what="the delivery's attempt recorded")
    [row] = await delivery_rows(db, receiver.url)
    reviewer = await asyncpg.connect(reviewer_url)
    try:
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await reviewer.execute("UPDATE webhook_deliveries SET delivered_at = NULL")
        other = await reviewer.fetchval(  # an event that is not one to deliver
            "SELECT position FROM events WHERE type <> 'approval.requested' "
            "AND type <> 'call.outcome_unknown' LIMIT 1"
        )
        made = await reviewer.fetchval(
            "SELECT signoff_webhook_record($1::bigint[], $2)",
            [other, row["position"]],
            receiver.url,
        )
        assert made == 0  # nothing else becomes a delivery, nor one event twice
        # The URL's path is often its secret (a Slack webhook's): a reviewer's login, which
        # people hold too, neither reads it nor learns the lease that would let it record an
        # attempt; the service asks only for where it left off.
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await reviewer.fetch("SELECT target, leased_until FROM webhook_deliveries")
        latest = await reviewer.fetchval("SELECT signoff_webhook_latest($1)", receiver.url)
        assert latest == row["position"]
    finally:
        await reviewer.close()
    async with temporary_login(database_url, "signoff_app") as worker_url:
        worker = await asyncpg.connect(worker_url)
        try:
            for statement in (
                "SELECT * FROM webhook_deliveries",
                "SELECT * FROM audit_webhook_deliveries",
                "SELECT signoff_webhook_latest('x')",
                "SELECT signoff_webhook_record('{1}', 'http://x/')",
                "SELECT * FROM signoff_webhook_claim('x', 1, 1)",
                "SELECT signoff_webhook_attempted(1, now(), 200, NULL, true, NULL)",
            ):
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    await worker.fetch(statement)
        finally:
            await worker.close()
    async with temporary_login(database_url, "signoff_auditor") as auditor_url:
        auditor = await asyncpg.connect(auditor_url)
        try:
            audited = await auditor.fetchrow(
                "SELECT * FROM audit_webhook_deliveries WHERE delivery_id = $1", row["delivery_id"]
            )
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await auditor.fetch("SELECT target FROM webhook_deliveries")
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await auditor.fetch("SELECT * FROM signoff_webhook_claim('x', 1, 1)")
        finally:
            await auditor.close()
    assert audited is not None
    assert (audited["target_host"], audited["attempts"]) == (urlsplit(receiver.url).netloc, 1)


@pytest.fixture
def trickler() -> Iterator[str]:
    """A receiver that answers one byte at a time, each well within a read timeout, so that
    its answer takes far longer than any attempt may."""
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def answer(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):  # the client hangs up at its timeout
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n" + b"X: " + b"y" * 100:
                if stop.wait(0.1):
                    return
                conn.sendall(bytes([byte]))

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=answer, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/hooks/signoff/{unique('trickler')}"
    finally:
        stop.set()
        thread.join()
        listener.close()


async def test_an_attempt_ends_at_its_timeout_however_slowly_the_receiver_answers(
    reviewer_url: str, trickler: str, store: ApprovalStore, db: Database
) -> None:
    """The timeout bounds the whole attempt, not each read: a receiver that sends its answer a
    byte at a time neither outlives the lease (another replica would post it again) nor holds
    up every other delivery."""
    webhook = WebhookSettings(trickler, SECRET, timeout_seconds=0.5, first_retry_seconds=30)
    async with webhook_service(reviewer_url, webhook):
        await ask(store, "alice")
        started = time.monotonic()

        async def attempted() -> bool:
            rows = await delivery_rows(db, trickler)
            return bool(rows) and rows[0]["attempts"] >= 1

        while not await attempted():
            assert time.monotonic() - started < 5, "the attempt outlived its timeout"
            await asyncio.sleep(0.1)
    [row] = await delivery_rows(db, trickler)
    assert row["delivered_at"] is None and row["last_status"] is None
    assert row["last_error"] == "TimeoutError"


async def test_a_url_that_cannot_be_posted_to_stops_the_start(reviewer_url: str) -> None:
    """A host no request can be made to (an invalid IDNA label) is found at start, not by every
    attempt failing unrecorded, and so never given up, for as long as the service runs."""
    webhook = WebhookSettings("http://xn--zz.example/hooks/secret-path", SECRET)
    with pytest.raises(ConfigurationError, match="SIGNOFF_WEBHOOK_URL") as caught:
        async with webhook_service(reviewer_url, webhook):
            pass
    assert "secret-path" not in str(caught.value) and "xn--zz" not in str(caught.value)
