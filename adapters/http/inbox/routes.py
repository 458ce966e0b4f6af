"""The inbox's routes: its page and files, and signing in and out (see the package)."""

from __future__ import annotations

from importlib.resources import files
from typing import Annotated, Any

from fastapi import APIRouter, Body, Request, Response
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from approvals import Identity
from ledger.log import get_logger

from ..approvals_api import service_of
from ..cookies import HOST_SESSION_COOKIE, plain_loopback, session_cookie
from ..csrf import CSRF_HEADER
from ..errors import ApiError

__all__ = ["CONTENT_SECURITY_POLICY", "MODULES", "InboxHeaders", "router"]

log = get_logger(__name__)

router = APIRouter(include_in_schema=False)

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
_SECURITY = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
)
_CACHE = {"Cache-Control": "no-cache"}  # the page and its files: ask again, a deploy changes them
# A browser keeps no cookie whose name and value pass 4096 bytes: it would drop a longer one
# without a word, and the page would be signed out at its first request.
_MAX_TOKEN = 4096 - len(HOST_SESSION_COOKIE) - 1

_STATIC = files(__package__) / "static"
_SCRIPT = "text/javascript; charset=utf-8"
# The page's script is ES modules (`script-src 'self'` allows them): the entry and what it
# imports, each a file of one job.
MODULES = (
    "inbox.js",
    "calls.js",
    "card.js",
    "decide.js",
    "net.js",
    "schema_form.js",
    "state.js",
    "text.js",
    "views.js",
)
_FILES = {**dict.fromkeys(MODULES, _SCRIPT), "inbox.css": "text/css; charset=utf-8"}


class InboxHeaders:
    """Adds the inbox's security headers to every response under `/inbox`, refusals too."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path != "/inbox" and not path.startswith("/inbox/"):
            await self.app(scope, receive, send)
            return
        session = path.startswith("/inbox/session")

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (k, v)
                    for k, v in message.get("headers", ())
                    if not (session and k.lower() == b"cache-control")
                ]
                headers.extend(_SECURITY)
                if session:
                    headers.append((b"cache-control", b"no-store"))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_headers)


def _file(name: str) -> bytes:
    return (_STATIC / name).read_bytes()


@router.get("/inbox")
@router.get("/inbox/approvals/{approval_id}")  # one approval's address: the page shows it
async def page() -> Response:
    return Response(
        _file("inbox.html"),
        media_type="text/html; charset=utf-8",
        headers=_CACHE,
    )


@router.get("/inbox/static/{name}")
async def static(name: str) -> Response:
    media_type = _FILES.get(name)
    if media_type is None:
        raise ApiError(404, "not_found", "no such file")
    return Response(_file(name), media_type=media_type, headers=_CACHE)


def _session(request: Request, identity: Identity, credential: str) -> dict[str, Any]:
    request.state.identity = identity  # for the request log
    csrf = service_of(request).authentication.csrf
    assert csrf is not None  # the service's authentication always has one
    return {
        "reviewer": identity.reviewer,
        "scope": str(identity.scope),
        "may_decide": identity.may_decide,
        "csrf_token": csrf.token_for(credential),
    }


@router.post("/inbox/session")
async def sign_in(request: Request, body: Annotated[dict[str, Any], Body()]) -> JSONResponse:
    # JSON only: a page of another site cannot send it without a CORS preflight, which this
    # service never answers, so it cannot sign a browser in as someone else.
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise ApiError(415, "unsupported_media_type", "signing in takes a JSON body")
    token = body.get("token")
    if (
        not isinstance(token, str)
        or not token
        or not token.isascii()
        or not token.isprintable()
        or any(c in token for c in ' ";,\\')
    ):
        raise ApiError(422, "invalid", 'signing in takes {"token": "<an API or bearer token>"}')
    if len(token) > _MAX_TOKEN:
        raise ApiError(
            422,
            "invalid",
            f"a token of more than {_MAX_TOKEN} characters does not fit in a browser's cookie; "
            "use it as a bearer token with the API",
        )
    identity = await service_of(request).authentication.authenticate(request, token)
    response = JSONResponse(_session(request, identity, token))
    response.set_cookie(
        session_cookie(request),
        token,
        httponly=True,
        secure=not plain_loopback(request),
        samesite="strict",
        path="/",
    )
    log.info("signed in", reviewer=identity.reviewer, credential=identity.credential)
    return response


@router.get("/inbox/session")
async def session(request: Request) -> JSONResponse:
    credential = request.cookies.get(session_cookie(request))
    if not credential:
        raise ApiError(401, "unauthenticated", "not signed in")
    identity = await service_of(request).authentication.authenticate(request, credential)
    return JSONResponse(_session(request, identity, credential))


@router.post("/inbox/session/end")
@router.delete("/inbox/session")
async def sign_out(request: Request) -> JSONResponse:
    credential = request.cookies.get(session_cookie(request))
    csrf = service_of(request).authentication.csrf
    if credential and (
        csrf is None or not await csrf.check(credential, request.headers.get(CSRF_HEADER))
    ):
        raise ApiError(403, "forbidden", f"signing out needs {CSRF_HEADER}")
    response = JSONResponse({"signed_out": True})
    response.delete_cookie(
        session_cookie(request),
        httponly=True,
        secure=not plain_loopback(request),
        samesite="strict",
        path="/",
    )
    return response
