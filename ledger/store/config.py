"""Database URLs: where the database is (as the settings say), normalized, and masked for logs."""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import (
    parse_qsl,
    quote,
    unquote,
    unquote_plus,
    urlencode,
    urlsplit,
    urlunsplit,
)

from ..errors import ConfigurationError

__all__ = [
    "HOST_CONNECT_SECONDS",
    "configured_url",
    "host_urls",
    "is_loopback",
    "masked",
    "normalize_url",
    "resolve_url",
    "with_login",
]

_SCHEMES = {"postgresql", "postgres"}

HOST_CONNECT_SECONDS = 10.0
"""How long a connection to one host of a multi-host URL may take by default, before the next
host is tried (`Settings.host_connect_seconds`)."""


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


def host_urls(url: str) -> list[tuple[str, str]]:
    """Each host of a multi-host URL as a URL of its own, in order, with a name for messages:
    `h1:p1,h2:p2` in the authority, or `?host=a,b&port=p1,p2` (a port alone is every host's).
    Everything else in the URL is kept as written. A URL with one host (or none, or ports that
    do not pair with its hosts: asyncpg then says why) is one item, the URL itself.

    asyncpg reads the same two forms, the authority's hosts first (it then ignores the
    query's), and bounds the whole list by one timeout: a caller tries these one by one."""
    head, _, fragment = url.partition("#")
    rest, question, query = head.partition("?")
    scheme, slashes, after = rest.partition("://")
    netloc, slash, path = after.partition("/")
    login, at, hostspec = netloc.rpartition("@")
    if not slashes:
        return [(url, "")]
    tail = f"{slash}{path}{question}{query}{'#' * bool(fragment)}{fragment}"
    if hostspec:
        hosts = hostspec.split(",")
        if len(hosts) < 2 or not all(hosts):
            return [(url, hostspec)]
        return [(f"{scheme}://{login}{at}{host}{tail}", unquote(host)) for host in hosts]
    items = [item for item in query.split("&") if item]
    values: dict[str, str] = {}
    for item in items:  # the last of a repeated parameter counts, as asyncpg reads them
        key, _, value = item.partition("=")
        values[unquote_plus(key)] = unquote_plus(value)
    hosts = values.get("host", "").split(",")
    ports = values["port"].split(",") if "port" in values else []
    if len(hosts) < 2 or not all(hosts) or len(ports) not in (0, 1, len(hosts)):
        return [(url, values.get("host", ""))]
    kept = [i for i in items if unquote_plus(i.partition("=")[0]) not in ("host", "port")]
    found = []
    for index, host in enumerate(hosts):
        port = ports[0] if len(ports) == 1 else ports[index] if ports else None
        own = {"host": host} if port is None else {"host": host, "port": port}
        params = "&".join([*kept, urlencode(own, safe="/:[]")])
        link = f"{scheme}://{netloc}{slash}{path}?{params}{'#' * bool(fragment)}{fragment}"
        found.append((link, host if port is None else f"{host}:{port}"))
    return found


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
