"""The inbox's session cookie: its name, and whether a request is plain http on one machine.

Over https the cookie is `__Host-signoff_session`: a browser keeps a `__Host-` cookie only when
it is Secure, for Path=/ and set by this host itself, so a sibling subdomain cannot plant one
of its own (a fixed session). On plain http between a browser and the service on one machine
(`plain_loopback`, for `--dev` and local use) it is `signoff_session`, without Secure. Each
kind of request reads only its own name.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from fastapi import Request

from ledger.store.config import is_loopback

__all__ = ["HOST_SESSION_COOKIE", "LOOPBACK_SESSION_COOKIE", "plain_loopback", "session_cookie"]

HOST_SESSION_COOKIE = "__Host-signoff_session"
LOOPBACK_SESSION_COOKIE = "signoff_session"


def plain_loopback(request: Request) -> bool:
    """Whether `request` came over plain http from this machine to a loopback name: the
    connection's scheme and peer, the Host the browser asked for and, when a browser sent
    one, its Origin. The service trusts no forwarded headers, so behind a proxy on the same
    machine the Host (the proxy must pass it on) or the Origin says https."""
    if request.url.scheme != "http" or request.client is None:
        return False
    origin = request.headers.get("origin")
    if origin is not None and not origin.startswith("http://"):
        return False
    host = urlsplit("//" + request.headers.get("host", "")).hostname or ""
    return is_loopback(request.client.host) and is_loopback(host)


def session_cookie(request: Request) -> str:
    """The name of the session cookie for `request` (it is Secure unless plain loopback)."""
    return LOOPBACK_SESSION_COOKIE if plain_loopback(request) else HOST_SESSION_COOKIE
