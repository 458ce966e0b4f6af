"""The reviewers' notifiers of `signoff serve`, Slack and e-mail, sending to real receivers on
loopback ports (an HTTP server that reads the Block Kit it gets; an `aiosmtpd` SMTP server),
from services whose login has only `signoff_reviewer`, on one database."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from adapters.http.mail import mail_message
from adapters.http.notices import Notice, approval_link, shown
from adapters.http.service import Service, open_service
from adapters.http.slack import slack_message
from approvals import ApprovalPolicy, ApprovalStore
from ledger.audit.reveals import reveal_problem
from ledger.errors import ConfigurationError
from ledger.journal import Journal
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.logins import temporary_login
from ledger.store.settings import EmailSettings, Settings, SlackSettings

from .support.http import token_for, unique
from .support.processes import ROOT, TEST_KEK, TEST_REVIEWER_KEK, kek_env
from .support.receivers import HttpReceiver, SmtpReceiver, http_receiver, smtp_receiver
from .support.replicas import serve_replicas
from .support.until import until

PUBLIC = "https://signoff.example.com/reviews"
TOKEN = "xoxb-test-" + "7" * 24
HOSTILE = "<!channel> <script>alert(1)</script> & <https://evil.example|click> \u202etxt.exe"
QUICK = 0.05  # seconds before the first retry


@pytest.fixture(scope="module")
async def reviewer_url(database_url: str, ring: KeyRing) -> AsyncIterator[str]:
    async with temporary_login(database_url, "signoff_reviewer") as url:
        yield url


@pytest.fixture
def slack_hook() -> Iterator[HttpReceiver]:
    with http_receiver(f"/services/T0/B0/{unique('secret')}") as receiver:
        yield receiver


@pytest.fixture
def slack_api() -> Iterator[HttpReceiver]:
    with http_receiver("/api/chat.postMessage") as receiver:
        receiver.otherwise = (200, b'{"ok": true, "ts": "1.2"}')
        yield receiver


@pytest.fixture
def smtp() -> Iterator[SmtpReceiver]:
    with smtp_receiver() as receiver:
        yield receiver


def mail_to(smtp: SmtpReceiver, **options: Any) -> EmailSettings:
    return EmailSettings(
        host=smtp.host,
        port=smtp.port,
        sender="signoff@example.com",
        recipients=("leads@example.com", "oncall@example.com"),
        **{"security": "none", "first_retry_seconds": QUICK, **options},
    )


@asynccontextmanager
async def notifying(reviewer_url: str, **settings: Any) -> AsyncIterator[Service]:
    service = await open_service(
        Settings(
            database_url=reviewer_url,
            kek=LocalKek(TEST_KEK),
            reviewer_kek=LocalKek(TEST_REVIEWER_KEK),
            public_url=PUBLIC,
            **settings,
        ),
        pool_size=3,
    )
    try:
        yield service
    finally:
        await service.close()


async def refund(store: ApprovalStore, *, tool: str = "refund", **policy: Any) -> str:
    """A pending refund of 120 EUR for order A-7 paid by card; its id."""
    approval = await store.request(
        run_id=unique("notify"),
        tool=tool,
        args={"amount": 120, "currency": "EUR", "order_id": "A-7", "card": "4111-1111"},
        call_id="c1",
        requested_by="support-agent",
        policy=ApprovalPolicy(approvers=frozenset({"group:support-leads"}), **policy),
    )
    return approval.approval_id


async def delivery_rows(db: Database, target: str) -> list[asyncpg.Record]:
    async with db.connection() as conn:
        rows: list[asyncpg.Record] = await conn.fetch(
            "SELECT * FROM webhook_deliveries WHERE target = $1 ORDER BY delivery_id", target
        )
    return rows


async def reveals_of(db: Database, approval_id: str) -> list[tuple[str, dict[str, Any]]]:
    events = await Journal(db).read_stream(f"reveal:{approval_id}")
    return [(e.actor, dict(e.data)) for e in events if e.type == "ledger.revealed"]


def mrkdwn_texts(value: Any) -> list[str]:
    """Every mrkdwn text of a Block Kit message, and its `text`."""
    found: list[str] = []
    if isinstance(value, dict):
        if value.get("type") == "mrkdwn":
            found.append(value["text"])
        for key, item in value.items():
            if key == "text" and isinstance(item, str) and "type" not in value:
                found.append(item)  # the message's own `text`
            found += mrkdwn_texts(item)
    elif isinstance(value, list):
        for item in value:
            found += mrkdwn_texts(item)
    return found


def check_block_kit(message: dict[str, Any], link: str) -> dict[str, Any]:
    """Check `message` is Block Kit as Slack takes it, with one link button to `link` and
    nothing that decides; its blocks by type (the first of each)."""
    blocks = message["blocks"]
    assert 1 <= len(blocks) <= 50
    by_type: dict[str, Any] = {}
    for block in blocks:
        by_type.setdefault(block["type"], block)
        if block["type"] == "section":
            assert "text" in block or "fields" in block
            assert len(block.get("fields", [])) <= 10
            for item in block.get("fields", []):
                assert item["type"] == "mrkdwn" and 1 <= len(item["text"]) <= 2000
            if "text" in block:
                assert len(block["text"]["text"]) <= 3000
    header = by_type["header"]["text"]
    assert header["type"] == "plain_text" and 1 <= len(header["text"]) <= 150
    [actions] = [b for b in blocks if b["type"] == "actions"]
    [button] = actions["elements"]
    assert button["type"] == "button" and button["url"] == link
    assert "value" not in button and "confirm" not in button
    assert button["text"]["type"] == "plain_text"
    assert "approve" not in str(actions).lower()
    for text in mrkdwn_texts(message):  # nothing from the request mentions or links
        assert "<" not in text and ">" not in text, text
    return by_type


def a_notice(**changes: Any) -> Notice:
    values: dict[str, Any] = {
        "approval_id": "ap-1",
        "tool": "refund",
        "run_id": "run-1",
        "requested_by": "support-agent",
        "requested_at": datetime(2026, 12, 5, 10, 0, tzinfo=UTC),
        "expires_at": datetime(2026, 12, 6, 10, 0, tzinfo=UTC),
        "status": "pending",
        "deciders": "one of support-leads",
        "irreversible": False,
        "description": "",
        "fields": (("amount", "120"),),
        "link": approval_link(PUBLIC, "ap-1"),
    }
    return Notice(**{**values, **changes})


def test_a_slack_message_escapes_what_the_request_says_and_keeps_within_block_kit_limits() -> None:
    hostile = a_notice(
        tool=HOSTILE * 10,
        run_id=HOSTILE,
        description=HOSTILE * 100,
        fields=tuple((f"{HOSTILE} {i}", "<" * 3000) for i in range(40)),
    )
    message = slack_message(hostile)
    by_type = check_block_kit(message, hostile.link)
    assert by_type["header"]["text"]["text"].startswith("Approval requested: <!channel>")
    assert "&lt;!channel&gt;" in message["text"]
    [first_value] = [
        f for b in message["blocks"] for f in b.get("fields", ()) if " 7*\n" in f["text"]
    ]
    assert len(first_value["text"]) > 1900  # cut to the limit, not emptied
    assert first_value["text"].endswith("&lt;…")  # and never in the middle of an escape
    plain = a_notice(irreversible=True)
    said = str(slack_message(plain))
    assert "120" in said and "one of support-leads" in said and "Irreversible" in said
    assert "Status" not in said
    # What notices carry is one line, in its order: no line break, no mark that reorders it.
    assert shown("refund\u202egnp.exe\r\nnext") == "refund gnp.exe  next"
    # Unicode's own line and paragraph separators break a line too (a forged "Decided by").
    assert shown("60\u2028Decided by: ann\u2029ok\x85") == "60 Decided by: ann ok "
    assert "*Status*\\napproved" in str(slack_message(a_notice(status="approved")))


def test_an_email_escapes_what_the_request_says_in_its_html() -> None:
    settings = EmailSettings(
        host="127.0.0.1", sender="signoff@example.com", recipients=("a@example.com",)
    )
    message = mail_message(a_notice(tool=f"pay\r\nBcc: x@evil.example {HOSTILE}"), settings, 7)
    assert "\n" not in message["Subject"] and "Bcc" not in message
    html_part = message.get_body(("html",))
    assert html_part is not None
    html = html_part.get_content()
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert f'href="{approval_link(PUBLIC, "ap-1")}"' in html
    assert message["Message-ID"] == "<signoff.delivery.7@example.com>"


async def test_slack_gets_the_headline_and_a_link_and_the_disclosure_is_journaled(
    reviewer_url: str, slack_hook: HttpReceiver, store: ApprovalStore, db: Database, ring: KeyRing
) -> None:
    slack = SlackSettings(webhook_url=slack_hook.url, first_retry_seconds=QUICK)
    async with notifying(reviewer_url, slack=slack):
        approval_id = await refund(
            store,
            headline=("amount", "currency", "card"),
            sensitive=frozenset({"card"}),
            irreversible=True,
            description="Refunds a paid order",
        )
        plain_id = await refund(store)  # no headline: no argument value is sent
        link, plain_link = approval_link(PUBLIC, approval_id), approval_link(PUBLIC, plain_id)
        await until(lambda: bool(slack_hook.with_link(link) and slack_hook.with_link(plain_link)))
    [got] = slack_hook.with_link(link)
    assert got.headers["Content-Type"].startswith("application/json")
    assert "Authorization" not in got.headers
    by_type = check_block_kit(got.json, link)
    assert link == f"{PUBLIC}/inbox/approvals/{approval_id}"
    assert by_type["header"]["text"]["text"] == "Approval requested: refund"
    facts = str(got.json["blocks"])
    for said in ("*amount*\\n120", "*currency*\\nEUR", "one of support-leads", "Irreversible"):
        assert said in facts, said
    assert b"4111-1111" not in got.body and b"card" not in got.body  # sensitive: never sent
    assert b"order_id" not in got.body and b"A-7" not in got.body  # not in the headline
    [plain] = slack_hook.with_link(plain_link)
    assert b"amount" not in plain.body and b"EUR" not in plain.body
    [(actor, data)] = await reveals_of(db, approval_id)
    assert actor == "notifier:slack"
    assert (data["fields"], data["approval_id"]) == ("amount,currency", approval_id)
    assert await reveal_problem(ring, f"reveal:{approval_id}", actor, data) is None
    assert await reveals_of(db, plain_id) == []  # nothing disclosed, nothing recorded


async def test_chat_post_message_carries_the_bearer_and_channel_and_retries_a_refusal(
    reviewer_url: str, slack_api: HttpReceiver, store: ApprovalStore, db: Database
) -> None:
    slack_api.answers = [(200, b'{"ok": false, "error": "ratelimited"}')]
    slack = SlackSettings(
        bot_token=TOKEN, channel="C0123", api_url=slack_api.url, first_retry_seconds=QUICK
    )
    records, logger = Records(), logging.getLogger("signoff")
    level = logger.level
    logger.addHandler(records)
    logger.setLevel(logging.DEBUG)
    try:
        async with notifying(reviewer_url, slack=slack):
            approval_id = await refund(store, tool=HOSTILE, headline=("amount",))
            link = approval_link(PUBLIC, approval_id)
            await until(lambda: len(slack_api.with_link(link)) >= 2)
            await until(
                lambda: any(
                    r.getMessage() == "slack notification delivered" for r in records.records
                )
            )
    finally:
        logger.removeHandler(records)
        logger.setLevel(level)
    first, second = slack_api.with_link(link)
    for got in (first, second):
        assert got.headers["Authorization"] == f"Bearer {TOKEN}"
        assert got.json["channel"] == "C0123"
        check_block_kit(got.json, link)
    assert "&lt;!channel&gt;" in got.json["text"] and "\u202e" not in str(got.json)
    [row] = [r for r in await delivery_rows(db, slack.target) if r["attempts"] == 2]
    assert (row["last_status"], row["last_error"]) == (200, None)
    assert row["delivered_at"] is not None
    # Both attempts sent the amount; its disclosure is recorded once, for the delivery.
    [(actor, data)] = await reveals_of(db, approval_id)
    assert (actor, data["request_id"]) == ("notifier:slack", f"delivery:{row['delivery_id']}")
    said = "\n".join(f"{r.getMessage()} {r.__dict__}" for r in records.records)
    assert "slack notification attempt failed" in said and "ratelimited" in said
    assert TOKEN not in said and "4111-1111" not in said


async def test_an_email_is_sent_after_the_server_refused_it_once(
    reviewer_url: str, smtp: SmtpReceiver, store: ApprovalStore, db: Database
) -> None:
    smtp.refusals = ["451 4.3.0 try again later"]
    email = mail_to(smtp)
    async with notifying(reviewer_url, email=email):
        approval_id = await refund(store, tool=HOSTILE, headline=("amount",), irreversible=True)
        link = approval_link(PUBLIC, approval_id)
        await until(lambda: bool(smtp.with_link(link)))
        await until(lambda: rows_delivered(db, email.target, 1))
    [mail] = smtp.with_link(link)
    assert smtp.attempts == 2
    assert mail.sender == "signoff@example.com"
    assert mail.recipients == ["leads@example.com", "oncall@example.com"]
    message: EmailMessage = mail.message
    assert message["Subject"].startswith("Approval requested: <!channel>")
    text, html = message.get_body(("plain",)), message.get_body(("html",))
    assert text is not None and html is not None
    assert link in text.get_content() and "amount: 120" in text.get_content()
    assert "Irreversible" in text.get_content()
    assert "<script>" not in html.get_content() and "&lt;script&gt;" in html.get_content()
    assert "\u202e" not in mail.text
    assert "4111-1111" not in mail.text  # the value (MIME boundaries hold random digits)
    [row] = [r for r in await delivery_rows(db, email.target) if r["delivered_at"] is not None]
    assert (row["attempts"], row["last_error"]) == (2, None)
    [(actor, _)] = await reveals_of(db, approval_id)
    assert actor == "notifier:email"


async def rows_delivered(db: Database, target: str, count: int) -> bool:
    rows = await delivery_rows(db, target)
    return len(rows) == count and all(r["delivered_at"] is not None for r in rows)


async def test_starttls_that_the_server_does_not_offer_sends_nothing_in_clear(
    reviewer_url: str, smtp: SmtpReceiver, store: ApprovalStore, db: Database
) -> None:
    email = mail_to(smtp, security="starttls", max_attempts=1)
    async with notifying(reviewer_url, email=email):
        await refund(store, headline=("amount",))

        async def given_up() -> bool:
            rows = await delivery_rows(db, email.target)
            return bool(rows) and rows[0]["attempts"] == 1

        await until(given_up)
    [row] = await delivery_rows(db, email.target)
    assert row["delivered_at"] is None and row["last_error"] == "SMTPNotSupportedError"
    assert smtp.attempts == 0 and smtp.mails == []


async def test_an_smtp_login_is_made_and_its_password_never_logged(
    reviewer_url: str, store: ApprovalStore
) -> None:
    password = "pw-" + unique("smtp")
    with smtp_receiver(credentials=("signoff", password)) as server:
        email = mail_to(server, user="signoff", password=password)
        assert password not in repr(email)
        records, logger = Records(), logging.getLogger("signoff")
        level = logger.level
        logger.addHandler(records)
        logger.setLevel(logging.DEBUG)
        try:
            async with notifying(reviewer_url, email=email):
                link = approval_link(PUBLIC, await refund(store))
                await until(lambda: bool(server.with_link(link)))
        finally:
            logger.removeHandler(records)
            logger.setLevel(level)
    assert server.logins == [("signoff", password)]
    assert server.with_link(link)[0].login == "signoff"
    assert all(password not in f"{r.getMessage()} {r.__dict__}" for r in records.records)


async def test_two_services_on_one_database_notify_each_request_once(
    reviewer_url: str,
    slack_hook: HttpReceiver,
    smtp: SmtpReceiver,
    store: ApprovalStore,
    db: Database,
) -> None:
    slack, email = (
        SlackSettings(webhook_url=slack_hook.url, first_retry_seconds=QUICK),
        mail_to(smtp),
    )
    async with (
        notifying(reviewer_url, slack=slack, email=email),
        notifying(reviewer_url, slack=slack, email=email),
    ):
        links = [approval_link(PUBLIC, await refund(store, headline=("amount",))) for _ in range(4)]
        for link in links:
            await until(lambda: bool(slack_hook.with_link(link) and smtp.with_link(link)))  # noqa: B023
        await until(lambda: rows_delivered(db, slack.target, 4))
        await until(lambda: rows_delivered(db, email.target, 4))
    for link in links:
        assert len(slack_hook.with_link(link)) == 1 and len(smtp.with_link(link)) == 1
    for target in (slack.target, email.target):
        assert [r["attempts"] for r in await delivery_rows(db, target)] == [1, 1, 1, 1]


async def test_two_serve_processes_configured_from_the_environment_notify_once(
    reviewer_url: str,
    slack_api: HttpReceiver,
    smtp: SmtpReceiver,
    store: ApprovalStore,
    db: Database,
) -> None:
    """Two `signoff serve` processes, configured from the environment as an operator would and
    used once their `/readyz` answers 200."""
    await token_for(db, unique("ops"))  # serve refuses to start with nobody to let in
    env = {
        **kek_env(),
        "PYTHONPATH": str(ROOT),
        "SIGNOFF_DATABASE_URL": reviewer_url,
        "SIGNOFF_PUBLIC_URL": PUBLIC,
        "SIGNOFF_SLACK_BOT_TOKEN": TOKEN,
        "SIGNOFF_SLACK_CHANNEL": "C0123",
        "SIGNOFF_SLACK_API_URL": slack_api.url,
        "SIGNOFF_SMTP_HOST": smtp.host,
        "SIGNOFF_SMTP_PORT": str(smtp.port),
        "SIGNOFF_SMTP_SECURITY": "none",
        "SIGNOFF_SMTP_FROM": "signoff@example.com",
        "SIGNOFF_SMTP_TO": "leads@example.com",
    }
    async with serve_replicas(env) as replicas:
        links = [approval_link(PUBLIC, await refund(store, headline=("amount",))) for _ in range(3)]
        for link in links:
            await until(lambda: bool(slack_api.with_link(link) and smtp.with_link(link)))  # noqa: B023
        slack_target = f"{slack_api.url}#signoff-slack-channel=C0123"
        await until(lambda: rows_delivered(db, slack_target, 3))
        [email_target] = {
            r["target"] for r in await delivery_rows_like(db, f"smtp://{smtp.host}:{smtp.port}/%")
        }
        await until(lambda: rows_delivered(db, email_target, 3))
    said = replicas.said
    for link in links:
        assert len(slack_api.with_link(link)) == 1 and len(smtp.with_link(link)) == 1
    assert all(TOKEN not in text for text in said)


async def delivery_rows_like(db: Database, pattern: str) -> list[asyncpg.Record]:
    async with db.connection() as conn:
        rows: list[asyncpg.Record] = await conn.fetch(
            "SELECT * FROM webhook_deliveries WHERE target LIKE $1", pattern
        )
    return rows


def test_notifier_settings_come_from_the_environment(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    got = Settings.from_env(
        {
            "SIGNOFF_PUBLIC_URL": "https://signoff.example.com/",
            "SIGNOFF_SLACK_BOT_TOKEN_FILE": str(token_file),
            "SIGNOFF_SLACK_CHANNEL": "C0123",
            "SIGNOFF_SMTP_HOST": "smtp.example.com",
            "SIGNOFF_SMTP_FROM": "signoff@example.com",
            "SIGNOFF_SMTP_TO": "a@example.com, b@example.com",
            "SIGNOFF_SMTP_USER": "signoff",
            "SIGNOFF_SMTP_PASSWORD": "hunter2-secret",
        }
    )
    assert got.public_url == "https://signoff.example.com"
    assert got.slack is not None and got.email is not None
    assert (got.slack.bot_token, got.slack.channel) == (TOKEN, "C0123")
    assert (got.email.port, got.email.security) == (587, "starttls")
    assert got.email.recipients == ("a@example.com", "b@example.com")
    assert TOKEN not in repr(got) and "hunter2" not in repr(got)
    assert "token" not in got.slack.target and TOKEN not in got.slack.target
    hook = "https://hooks.slack.com/services/T0/B0/secretpath"
    refused = {
        "a link needs the public URL": {"SIGNOFF_SLACK_WEBHOOK_URL": hook},
        "both ways to Slack": {
            "SIGNOFF_PUBLIC_URL": PUBLIC,
            "SIGNOFF_SLACK_WEBHOOK_URL": hook,
            "SIGNOFF_SLACK_BOT_TOKEN": TOKEN,
        },
        "a token without a channel": {
            "SIGNOFF_PUBLIC_URL": PUBLIC,
            "SIGNOFF_SLACK_BOT_TOKEN": TOKEN,
        },
        "a plain http webhook": {
            "SIGNOFF_PUBLIC_URL": PUBLIC,
            "SIGNOFF_SLACK_WEBHOOK_URL": "http://hooks.slack.com/services/secretpath",
        },
        "a password in clear": {
            "SIGNOFF_PUBLIC_URL": PUBLIC,
            "SIGNOFF_SMTP_HOST": "smtp.example.com",
            "SIGNOFF_SMTP_SECURITY": "none",
            "SIGNOFF_SMTP_FROM": "signoff@example.com",
            "SIGNOFF_SMTP_TO": "a@example.com",
            "SIGNOFF_SMTP_USER": "u",
            "SIGNOFF_SMTP_PASSWORD": "hunter2-secret",
        },
        "no recipients": {
            "SIGNOFF_PUBLIC_URL": PUBLIC,
            "SIGNOFF_SMTP_HOST": "smtp.example.com",
            "SIGNOFF_SMTP_FROM": "signoff@example.com",
        },
        "a header in an address": {
            "SIGNOFF_PUBLIC_URL": PUBLIC,
            "SIGNOFF_SMTP_HOST": "smtp.example.com",
            "SIGNOFF_SMTP_FROM": "signoff@example.com",
            "SIGNOFF_SMTP_TO": "a@example.com\r\nBcc: x@evil.example",
        },
        "a channel without a token": {"SIGNOFF_SLACK_CHANNEL": "C0123"},
        "a public URL with a query": {"SIGNOFF_PUBLIC_URL": "https://s.example.com/?a=b"},
    }
    for why, environ in refused.items():
        with pytest.raises(ConfigurationError) as caught:
            Settings.from_env(environ)
        said = str(caught.value)
        assert "SIGNOFF_" in said, why
        assert "secretpath" not in said and TOKEN not in said and "hunter2" not in said, why


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
