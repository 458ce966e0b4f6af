"""The web inbox of `signoff serve`: one HTML page, its script (plain ES modules) and one style
sheet shipped in this package (`static/`), served by the same process; nothing is built or
downloaded.

- `GET /inbox` is the page (its query holds the filters), and so is
  `GET /inbox/approvals/{id}` (one approval's address, for links in notifications);
  `GET /inbox/static/{name}` its files (`inbox.css`, `inbox.js` and the modules it imports). Every
  response of the inbox carries a strict Content-Security-Policy (no inline script or style,
  nothing from elsewhere), `X-Content-Type-Options: nosniff` and `Referrer-Policy: no-referrer`.
- `POST /inbox/session` `{"token": ...}` signs in: the token is authenticated like a bearer
  token (any kind the service accepts) and set as an HttpOnly, SameSite=Strict cookie holding
  the token itself, so that any replica can check it and no process keeps a session. The
  answer carries the CSRF token (`csrf.CsrfKey`) that the page sends as `X-CSRF-Token` with
  every unsafe request. `GET /inbox/session` says who is signed in and gives the CSRF token
  again (after a reload); `POST /inbox/session/end` (or `DELETE /inbox/session`) signs out.
- The cookie is `__Host-signoff_session`, Secure, unless the request is plain http between a
  browser and the service on one machine (`cookies.plain_loopback`): there it is
  `signoff_session`, without Secure, for browsers that keep no Secure cookie over plain http.
"""

from __future__ import annotations

from ..cookies import plain_loopback
from .routes import CONTENT_SECURITY_POLICY, MODULES, InboxHeaders, router

__all__ = ["CONTENT_SECURITY_POLICY", "MODULES", "InboxHeaders", "plain_loopback", "router"]
