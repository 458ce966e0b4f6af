"""Settings of the reviewers' notifiers (Slack, e-mail) and of the service's public URL, which
their links open. Checked here, read from the environment by `ledger.store.settings`.

A notifier's secrets (the Slack incoming webhook's URL, whose path is its secret; the bot
token; the SMTP password) are never in a `repr` nor in an error message.
"""

from __future__ import annotations

import hashlib
import math
import unicodedata
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ..errors import ConfigurationError
from .config import is_loopback

__all__ = [
    "SLACK_API_URL",
    "SMTP_SECURITY",
    "EmailSettings",
    "SlackSettings",
    "public_url",
]

SLACK_API_URL = "https://slack.com/api/chat.postMessage"
"""Where a bot token posts (GovSlack's is https://slack-gov.com/api/chat.postMessage)."""
SMTP_SECURITY = ("starttls", "tls", "none")
"""How the SMTP connection is protected: STARTTLS on a plain connection (port 587), TLS from
the first byte (port 465), or nothing (a relay on this machine, port 25)."""
_DEFAULT_PORTS = {"starttls": 587, "tls": 465, "none": 25}
_URL_MAX = 2048
_ADDRESS_MAX = 254
_RECIPIENTS_MAX = 50


def _visible(text: str) -> bool:
    """No whitespace, control or invisible character in `text`."""
    return not any(c.isspace() or unicodedata.category(c)[0] in ("C", "Z") for c in text)


def _http_url(value: object, variable: str, *, secret: bool) -> str:
    """An `https://` URL (plain `http://` only to a loopback host), without user, password or
    fragment; the error never quotes a `secret` one."""
    shown = "" if secret else f" ({value!r})"
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(f"{variable} is empty: expected an https:// URL")
    value = value.strip()
    parts = urlsplit(value)
    try:
        host = parts.hostname
        parts.port  # noqa: B018 -- a malformed port raises here
    except ValueError:
        raise ConfigurationError(f"{variable} has a malformed host or port{shown}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not host:
        raise ConfigurationError(f"{variable} is not an https:// URL with a host{shown}")
    if scheme == "http" and not is_loopback(host):
        raise ConfigurationError(
            f"{variable} is plain http to another machine{shown}: use https://, so that "
            "nobody on the way reads what it carries"
        )
    if parts.username is not None or parts.password is not None:
        raise ConfigurationError(f"{variable} holds a user or password")
    if parts.fragment or "#" in value:
        raise ConfigurationError(f"{variable} has a #fragment{shown}")
    if len(value) > _URL_MAX or not _visible(value):
        raise ConfigurationError(
            f"{variable} is longer than {_URL_MAX} characters or holds spaces{shown}"
        )
    return scheme + value[len(parts.scheme) :]


def public_url(value: object) -> str:
    """The service's public base URL (`SIGNOFF_PUBLIC_URL`), checked, without a trailing slash:
    what reviewers open, so `https://` (plain http only to a loopback host), no query.

    Raises:
        ConfigurationError: not such a URL.
    """
    url = _http_url(value, "SIGNOFF_PUBLIC_URL", secret=False)
    if urlsplit(url).query:
        raise ConfigurationError(f"SIGNOFF_PUBLIC_URL has a ?query ({url!r})")
    return url.rstrip("/")


def _check_retries(settings: SlackSettings | EmailSettings, what: str) -> None:
    for name in ("timeout_seconds", "first_retry_seconds", "max_retry_seconds"):
        seconds = getattr(settings, name)
        if not math.isfinite(seconds) or seconds <= 0:
            raise ConfigurationError(f"{what} {name} is {seconds}: expected more than 0")
    if settings.max_attempts < 1:
        raise ConfigurationError(f"{what} max_attempts is {settings.max_attempts}: expected 1+")


@dataclass(frozen=True, slots=True)
class SlackSettings:
    """Where the Slack notifier posts: an incoming webhook (`webhook_url`, whose path is its
    secret), or `chat.postMessage` with a bot token into `channel` (at `api_url`). Exactly one
    of the two. Retried as webhooks are (`WebhookSettings`)."""

    webhook_url: str | None = field(default=None, repr=False)
    bot_token: str | None = field(default=None, repr=False)
    channel: str | None = None
    api_url: str = SLACK_API_URL
    timeout_seconds: float = 10.0
    first_retry_seconds: float = 5.0
    max_retry_seconds: float = 900.0
    max_attempts: int = 10

    def __post_init__(self) -> None:
        if (self.webhook_url is None) == (self.bot_token is None):
            raise ConfigurationError(
                "Slack needs one of SIGNOFF_SLACK_WEBHOOK_URL (an incoming webhook) or "
                "SIGNOFF_SLACK_BOT_TOKEN with SIGNOFF_SLACK_CHANNEL (chat.postMessage)"
            )
        if self.webhook_url is not None:
            if self.channel is not None:
                raise ConfigurationError(
                    "SIGNOFF_SLACK_CHANNEL goes with SIGNOFF_SLACK_BOT_TOKEN: an incoming "
                    "webhook posts into the channel it was made for"
                )
            url = _http_url(self.webhook_url, "SIGNOFF_SLACK_WEBHOOK_URL", secret=True)
            object.__setattr__(self, "webhook_url", url)
        else:
            token = self.bot_token
            if not isinstance(token, str) or not token.startswith("xox") or not _visible(token):
                raise ConfigurationError(
                    "SIGNOFF_SLACK_BOT_TOKEN is not a Slack token (xoxb-...) of visible characters"
                )
            channel = self.channel
            if not isinstance(channel, str) or not channel or len(channel) > 80:
                raise ConfigurationError(
                    "SIGNOFF_SLACK_BOT_TOKEN needs SIGNOFF_SLACK_CHANNEL: the channel's id "
                    "(C0123ABCD) or name, at most 80 characters"
                )
            if not _visible(channel):
                raise ConfigurationError(f"SIGNOFF_SLACK_CHANNEL holds spaces ({channel!r})")
            api = _http_url(self.api_url, "SIGNOFF_SLACK_API_URL", secret=False)
            object.__setattr__(self, "api_url", api)
        _check_retries(self, "slack")

    @property
    def target(self) -> str:
        """What its deliveries are recorded under: one per destination, so that every replica
        configured alike records the same deliveries (and never the token)."""
        if self.webhook_url is not None:
            return f"{self.webhook_url}#signoff-slack"
        return f"{self.api_url}#signoff-slack-channel={self.channel}"

    @property
    def url(self) -> str:
        """Where it posts."""
        return self.webhook_url if self.webhook_url is not None else self.api_url


@dataclass(frozen=True, slots=True)
class EmailSettings:
    """Where the e-mail notifier sends: an SMTP server (`host`, `port`), protected as
    `security` says, logged in as `user` when one is given, from `sender` to `recipients`.
    A password is sent only over TLS, or to a server on this machine. Retried as webhooks are
    (`WebhookSettings`)."""

    host: str
    sender: str
    recipients: tuple[str, ...]
    port: int = 0
    """0: the security's usual port (587, 465, 25)."""
    security: str = "starttls"
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    timeout_seconds: float = 10.0
    first_retry_seconds: float = 5.0
    max_retry_seconds: float = 900.0
    max_attempts: int = 10

    def __post_init__(self) -> None:
        host = self.host.strip() if isinstance(self.host, str) else ""
        if not host or len(host) > 253 or not _visible(host) or "/" in host or "@" in host:
            raise ConfigurationError(f"SIGNOFF_SMTP_HOST is not a host name ({self.host!r})")
        object.__setattr__(self, "host", host.lower())
        if self.security not in SMTP_SECURITY:
            raise ConfigurationError(
                f"SIGNOFF_SMTP_SECURITY is {self.security!r}: expected one of "
                f"{', '.join(SMTP_SECURITY)}"
            )
        port = self.port or _DEFAULT_PORTS[self.security]
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise ConfigurationError(f"SIGNOFF_SMTP_PORT is {self.port!r}: expected 1 to 65535")
        object.__setattr__(self, "port", port)
        object.__setattr__(self, "sender", _address(self.sender, "SIGNOFF_SMTP_FROM"))
        if isinstance(self.recipients, str) or not self.recipients:
            raise ConfigurationError(
                "SIGNOFF_SMTP_TO names nobody: expected addresses, comma-separated"
            )
        if len(self.recipients) > _RECIPIENTS_MAX:
            raise ConfigurationError(f"SIGNOFF_SMTP_TO names more than {_RECIPIENTS_MAX}")
        recipients = tuple(dict.fromkeys(_address(r, "SIGNOFF_SMTP_TO") for r in self.recipients))
        object.__setattr__(self, "recipients", recipients)
        if (self.user is None) != (self.password is None):
            raise ConfigurationError(
                "SIGNOFF_SMTP_USER and SIGNOFF_SMTP_PASSWORD go together (or neither)"
            )
        if self.user is not None and (not self.user or not _visible(self.user)):
            raise ConfigurationError("SIGNOFF_SMTP_USER is empty or holds spaces")
        if self.password is not None and self.security == "none" and not is_loopback(host):
            raise ConfigurationError(
                "SIGNOFF_SMTP_PASSWORD would cross the network in clear: set "
                "SIGNOFF_SMTP_SECURITY to starttls or tls (none only to a server on this machine)"
            )
        _check_retries(self, "e-mail")

    @property
    def target(self) -> str:
        """What its deliveries are recorded under: the server, and a digest of the sender and
        recipients (auditors read the server, not the addresses), so that every replica
        configured alike records the same deliveries."""
        who = "\n".join((self.sender, *sorted(self.recipients)))
        digest = hashlib.sha256(who.encode()).hexdigest()[:16]
        host = f"[{self.host}]" if ":" in self.host else self.host  # an IPv6 address
        return f"smtp://{host}:{self.port}/#{digest}"


def _address(value: object, variable: str) -> str:
    """An e-mail address as given (trimmed): local part, @, domain; nothing that would let it
    reach a header as more than an address."""
    text = value.strip() if isinstance(value, str) else ""
    local, at, domain = text.rpartition("@")
    if (
        not at
        or not local
        or "." not in domain
        or len(text) > _ADDRESS_MAX
        or not _visible(text)
        or any(c in text for c in '<>,;"()\\')
    ):
        raise ConfigurationError(f"{variable}: {value!r} is not an e-mail address (a@b.example)")
    return text
