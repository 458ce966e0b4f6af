"""Receivers the notifiers' tests send to, on loopback ports: an HTTP receiver (Slack's
incoming webhook and `chat.postMessage`) and an SMTP server (`aiosmtpd`), each recording what
it got and answering with the failures it is told to, in turn."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session

from .ports import free_port

__all__ = ["HttpReceiver", "Mail", "SmtpReceiver", "http_receiver", "smtp_receiver"]


@dataclass
class Posted:
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class HttpReceiver:
    """Records every POST (and GET, with an empty body); answers with `answers` in turn
    (status, body), then `otherwise`."""

    url: str
    otherwise: tuple[int, bytes] = (200, b"ok")
    answers: list[tuple[int, bytes]] = field(default_factory=list)
    received: list[Posted] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def with_link(self, link: str) -> list[Posted]:
        """The posts whose body holds `link` (a button's URL)."""
        with self.lock:
            return [p for p in self.received if link.encode() in p.body]


@contextmanager
def http_receiver(path: str) -> Iterator[HttpReceiver]:
    """An `HttpReceiver` at `path` on a free loopback port, for the block's time."""
    state = HttpReceiver(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with state.lock:
                state.received.append(Posted(self.path, dict(self.headers.items()), body))
                status, answer = state.answers.pop(0) if state.answers else state.otherwise
            self.send_response(status)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        do_GET = do_POST

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}{path}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class Mail:
    sender: str
    recipients: list[str]
    message: EmailMessage
    login: str | None

    @property
    def text(self) -> str:
        """Its headers and every text part, decoded."""
        parts = [str(v) for v in self.message.values()]
        for part in self.message.walk():
            if part.get_content_maintype() == "text":
                parts.append(part.get_content())
        return "\n".join(parts)


@dataclass
class SmtpReceiver:
    """Records every message it accepts; answers DATA with `refusals` in turn (an SMTP reply
    such as "451 try later"), then accepts. `attempts` counts every DATA."""

    host: str
    port: int
    refusals: list[str] = field(default_factory=list)
    mails: list[Mail] = field(default_factory=list)
    attempts: int = 0
    logins: list[tuple[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def with_link(self, link: str) -> list[Mail]:
        """The messages whose text (decoded, any part) holds `link`."""
        with self.lock:
            return [m for m in self.mails if link in m.text]

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        with self.lock:
            self.attempts += 1
            if self.refusals:
                return self.refusals.pop(0)
            parsed = message_from_bytes(cast(bytes, envelope.content), policy=policy.default)
            login = session.auth_data if isinstance(session.auth_data, str) else None
            self.mails.append(Mail(str(envelope.mail_from), list(envelope.rcpt_tos), parsed, login))
        return "250 OK"


@contextmanager
def smtp_receiver(*, credentials: tuple[str, str] | None = None) -> Iterator[SmtpReceiver]:
    """An `SmtpReceiver` on a loopback port, in a thread of its own, for the block's time; it
    offers no STARTTLS. With `credentials`, it takes AUTH (over the plain connection, as a
    server on this machine may) and records each login tried."""
    state = SmtpReceiver("127.0.0.1", free_port())
    options: dict[str, Any] = {}
    if credentials is not None:

        def authenticate(
            server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any
        ) -> Any:
            from aiosmtpd.smtp import AuthResult, LoginPassword

            if not isinstance(data, LoginPassword):
                return AuthResult(success=False)
            user, password = data.login.decode(), data.password.decode()
            with state.lock:
                state.logins.append((user, password))
            ok = (user, password) == credentials
            return AuthResult(success=ok, auth_data=user if ok else None)

        options = {"authenticator": authenticate, "auth_require_tls": False}
    controller = Controller(state, hostname=state.host, port=state.port, **options)
    controller.start()
    try:
        yield state
    finally:
        controller.stop()
