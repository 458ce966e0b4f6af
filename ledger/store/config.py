"""Database URLs: where the database is (as the settings say), normalized, and masked for logs."""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from ..errors import ConfigurationError

__all__ = [
    "configured_url",
    "is_loopback",
    "masked",
    "normalize_url",
    "resolve_url",
    "with_login",
]

_SCHEMES = {"postgresql", "postgres"}


def configured_url(explicit: str | None = None) -> str | None:
    """The URL given, else the environment's settings' (`Settings.from_env`), normalized; None
    when there is none."""
    from .settings import Settings  # imported late: settings import this module

    return Settings.from_env(database_url=explicit).database_url


def resolve_url(explicit: str | None = None) -> str:
    """The configured URL, or the embedded server's (started on first use)."""
    from .settings import Settings

    return Settings.from_env(database_url=explicit).resolve_url()


def normalize_url(url: str) -> str:
    """Accept the URLs psql takes (and SQLAlchemy's `postgresql+driver://`); return a libpq URL.

    Several hosts are one server with standbys, tried in order, as libpq and asyncpg both
    take them: `postgresql://u@h1:5432,h2:5432/db?target_session_attrs=read-write` connects
    to whichever is the primary now (what a failover needs).

    Raises:
        ConfigurationError: not a PostgreSQL URL.
    """
    parts = urlsplit(url.strip())
    scheme, _, driver = parts.scheme.partition("+")
    if scheme not in _SCHEMES:
        raise ConfigurationError(
            f"not a PostgreSQL URL: {masked(url)!r} (expected postgresql://user@host:port/database)"
        )
    if driver not in ("", "asyncpg", "psycopg", "psycopg2"):
        raise ConfigurationError(f"unsupported driver {driver!r} in database URL")
    return urlunsplit(("postgresql", *parts[1:]))


def is_loopback(host: str) -> bool:
    """Whether `host` names this machine only (127.0.0.0/8, ::1 with or without brackets,
    localhost)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def with_login(url: str, user: str, password: str) -> str:
    """`url` logging in as `user` with `password` instead (same host or socket, same database)."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{host}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


_SECRET_PARAMETERS = {"password", "sslpassword"}
_PASSWORD = re.compile(r"^([a-z0-9+.-]+://[^:/?#@]*):.*@", re.IGNORECASE | re.DOTALL)


def masked(url: str) -> str:
    """The URL with any password hidden (in the authority or the query), fit for logs and
    error messages; an unparsable one is not shown at all. Parsed here rather than by a URL
    library: a multi-host authority (`h1:5432,h2:5432`) has no single port to parse."""
    # The password first, before any parsing: libpq takes `#`, `/` or `?` in it, which would
    # otherwise end the authority early and leave the password in the path, the query or the
    # fragment (shown). It runs from the first `:` after the user to the last `@`.
    url = _PASSWORD.sub(r"\g<1>:***@", url, count=1)
    try:
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        return "<unparsable database URL>"
    if parts.scheme.partition("+")[0] not in _SCHEMES:
        return "<unparsable database URL>"
    login, at, authority = parts.netloc.rpartition("@")
    user, colon, _password = login.partition(":")
    netloc = f"{user}{':***' if colon else ''}{at}{authority}"
    shown = [(k, "***" if k.lower() in _SECRET_PARAMETERS else v) for k, v in query]
    text = urlunsplit(
        (parts.scheme, netloc, parts.path, urlencode(shown, safe="*/,:"), parts.fragment)
    )
    if not netloc:  # a socket URL (`postgresql:///db?host=/run`) keeps its empty authority
        text = f"{parts.scheme}://{text.removeprefix(parts.scheme + ':')}"
    return text
