"""The e-mail notifier of `signoff serve`: a message for each new approval request, sent over
SMTP (`SIGNOFF_SMTP_*`) to the configured recipients; delivered once across replicas and
retried as webhooks are (`deliveries.Deliveries`).

The message (`mail_message`, pure) says what the Slack message says (`notices.Notice`), as
plain text with an HTML alternative whose every request text is escaped, and links to the
approval in the inbox; it carries no way to decide. Its `Message-ID` is the delivery's, the same
on every attempt, so a mail client shows a retry of a message that did arrive only once.

A delivery is made when the server accepts the message for at least one recipient. The
connection is protected as the settings say (STARTTLS, which must be offered, or TLS); a
password is sent only over it (or to a server on this machine). Logs and the deliveries' record
carry an SMTP failure's kind alone (the server's reply may quote addresses), never the password
or the message.
"""

from __future__ import annotations

import asyncio
import html
import smtplib
import ssl
from email.message import EmailMessage
from email.utils import format_datetime, formatdate
from typing import Any

import asyncpg

from approvals import ApprovalStore
from ledger.log import get_logger
from ledger.store import Database
from ledger.store.notifier_settings import EmailSettings

from .deliveries import Deliveries
from .notices import Notice, notice_for, shown

__all__ = ["ACTOR", "EmailNotifier", "mail_message"]

log = get_logger(__name__)

ACTOR = "notifier:email"
"""Its name in the journal, where it records the headline values it sends."""
_SUBJECT_CHARS = 150


def _facts(notice: Notice) -> list[tuple[str, str]]:
    expires = "never" if notice.expires_at is None else format_datetime(notice.expires_at)
    return [
        ("Tool", notice.tool),
        ("Run", notice.run_id),
        ("Requested by", notice.requested_by),
        ("Decided by", notice.deciders),
        ("Requested", format_datetime(notice.requested_at)),
        ("Expires", expires),
        *([("Status", notice.status)] if notice.status != "pending" else []),
    ]


def _plain(notice: Notice) -> str:
    lines = [f"Approval requested: {notice.tool}", ""]
    lines += [f"{label}: {value}" for label, value in _facts(notice)]
    if notice.irreversible:
        lines += ["", "Irreversible: this tool's effect cannot be undone."]
    if notice.description:
        lines += ["", notice.description]
    if notice.fields:
        lines += ["", *(f"{name}: {value}" for name, value in notice.fields)]
    lines += [
        "",
        f"Open it in Signoff to decide: {notice.link}",
        "",
        f"Approval {notice.approval_id}",
    ]
    return "\n".join(lines) + "\n"


def _html(notice: Notice) -> str:
    e = html.escape

    def rows(pairs: list[tuple[str, str]]) -> str:
        return "".join(
            f'<tr><th align="left" style="padding-right:1em">{e(k)}</th><td>{e(v)}</td></tr>'
            for k, v in pairs
        )

    parts = [
        "<!DOCTYPE html><html><body>",
        f'<h1 style="font-size:1.3em">Approval requested: {e(notice.tool)}</h1>',
        f"<table>{rows(_facts(notice))}</table>",
    ]
    if notice.irreversible:
        parts.append("<p><strong>Irreversible:</strong> this tool's effect cannot be undone.</p>")
    if notice.description:
        parts.append(f"<p>{e(notice.description)}</p>")
    if notice.fields:
        parts.append(f'<table style="font-size:1.2em">{rows(list(notice.fields))}</table>')
    parts += [
        f'<p><a href="{e(notice.link, quote=True)}">Open it in Signoff to decide</a></p>',
        f'<p style="color:#555">Approval {e(notice.approval_id)}</p>',
        "</body></html>",
    ]
    return "".join(parts)


def mail_message(notice: Notice, settings: EmailSettings, delivery_id: int) -> EmailMessage:
    """The message of `notice` for delivery `delivery_id`: plain text and an HTML alternative."""
    message = EmailMessage()
    message["Subject"] = shown(
        f"Approval requested: {notice.tool} (run {notice.run_id})", _SUBJECT_CHARS
    )
    message["From"] = settings.sender
    message["To"] = ", ".join(settings.recipients)
    message["Date"] = formatdate(localtime=False, usegmt=True)
    domain = settings.sender.rpartition("@")[2]
    message["Message-ID"] = f"<signoff.delivery.{delivery_id}@{domain}>"
    message["Auto-Submitted"] = "auto-generated"  # RFC 3834: no automatic replies
    message["X-Signoff-Approval"] = shown(notice.approval_id, 200)
    message.set_content(_plain(notice))
    message.add_alternative(_html(notice), subtype="html")
    return message


def _sent(settings: EmailSettings, message: EmailMessage) -> None:
    """Send `message` as the settings say (blocking: run in a thread)."""
    context = ssl.create_default_context()
    client: smtplib.SMTP
    if settings.security == "tls":
        client = smtplib.SMTP_SSL(
            settings.host, settings.port, timeout=settings.timeout_seconds, context=context
        )
    else:
        client = smtplib.SMTP(settings.host, settings.port, timeout=settings.timeout_seconds)
    with client:
        client.ehlo()
        if settings.security == "starttls":
            client.starttls(context=context)  # refused unless the server offers it
            client.ehlo()
        if settings.user is not None and settings.password is not None:
            client.login(settings.user, settings.password)
        refused = client.send_message(
            message, from_addr=settings.sender, to_addrs=list(settings.recipients)
        )
    if refused:  # accepted for the others: delivered; which were refused is not logged
        log.warning("e-mail refused for some recipients", refused=len(refused))


class EmailNotifier(Deliveries):
    """The e-mail task of one service process: `start()` it, `close()` it."""

    noun = "e-mail notification"
    channel = "email"

    def __init__(
        self,
        db: Database,
        store: ApprovalStore,
        settings: EmailSettings,
        public_url: str,
        *,
        poll_interval: float = 1.0,
    ) -> None:
        super().__init__(db, store, settings.target, settings, poll_interval=poll_interval)
        self.settings = settings
        self.public_url = public_url

    def _described(self) -> dict[str, Any]:
        return {
            "host": self.settings.host,
            "port": self.settings.port,
            "security": self.settings.security,
            "recipients": len(self.settings.recipients),
        }

    async def _send(self, row: asyncpg.Record) -> None:
        notice = await notice_for(
            self.db,
            self.store,
            row["position"],
            row["delivery_id"],
            public_url=self.public_url,
            notifier=ACTOR,
        )
        message = mail_message(notice, self.settings, row["delivery_id"])
        # Each socket operation is bounded by the timeout; so is the whole attempt, here. A
        # thread past it cannot be stopped: should it still send, the retry is a duplicate
        # with the same Message-ID.
        async with asyncio.timeout(self.settings.timeout_seconds):
            await asyncio.to_thread(_sent, self.settings, message)
