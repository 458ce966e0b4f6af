"""Where the database is: `SIGNOFF_DATABASE_URL`, then `DATABASE_URL`, then the embedded server."""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

from sqlalchemy.engine import make_url

from ..errors import ConfigurationError

__all__ = ["configured_url", "masked", "normalize_url", "resolve_url"]

_SCHEMES = {"postgresql", "postgres"}


def configured_url(explicit: str | None = None) -> str | None:
    """The URL given, else the one in the environment, normalized; None when there is none."""
    url = explicit or os.environ.get("SIGNOFF_DATABASE_URL") or os.environ.get("DATABASE_URL")
    return normalize_url(url) if url else None


def resolve_url(explicit: str | None = None) -> str:
    """The configured URL, or the embedded server's (started on first use)."""
    url = configured_url(explicit)
    if url is not None:
        return url
    from . import embedded  # imported late: only this path needs the `embedded` extra

    return embedded.ensure_server()


def normalize_url(url: str) -> str:
    """Accept the URLs psql takes (and SQLAlchemy's `postgresql+driver://`); return a libpq URL.

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


_SECRET_PARAMETERS = {"password", "sslpassword"}


def masked(url: str) -> str:
    """The URL with any password hidden (in the authority or the query), fit for logs and
    error messages; an unparsable one is not shown at all."""
    try:
        parsed = make_url(url)
    except Exception:
        return "<unparsable database URL>"
    hidden = {k: "***" for k in parsed.query if k.lower() in _SECRET_PARAMETERS}
    return parsed.update_query_dict(hidden).render_as_string(hide_password=True)
