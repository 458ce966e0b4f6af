"""The API's errors: one JSON shape, `{"error": CODE, "message": TEXT}`, for every refusal.

Handlers turn `ApiError`, the framework's HTTP errors and validation errors into it, and the
library's typed errors by `ERROR_TABLE`, the one table from error type to status, code and
message: a route lets a library error through unless what it means depends on the route (an
approval id that is no id is "not found" where it is in the path; resolving a settled call says
who settled it). A library error the table does not name is a 500 whose message names no value
(its type only is logged).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from approvals.errors import (
    ApprovalAlreadyDecided,
    ApprovalExpired,
    DecisionNotAllowed,
    InvalidApprovalRequest,
    UnknownApproval,
)
from approvals.policies import (
    InvalidPolicySet,
    PolicyConflict,
    PolicyNotPermitted,
    UnknownPolicySet,
)
from ledger.errors import (
    CallStateError,
    DatabaseUnavailable,
    DigestError,
    DigestMismatch,
    InvalidEvent,
    InvalidToolCall,
    NoActiveKey,
    NotInDigest,
    SignoffError,
    UnknownCall,
)
from ledger.log import get_logger

__all__ = [
    "ERROR_TABLE",
    "ApiError",
    "Refusal",
    "install_error_handlers",
    "problem",
    "reason",
    "refusal_of",
]

log = get_logger(__name__)

_CODES = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
    422: "invalid",
    429: "too_many_requests",
    503: "unavailable",
}


class ApiError(Exception):
    """A refusal with its status, a stable code and a message for the caller."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers = dict(headers or {})


def reason(error: BaseException) -> str:
    """The error's message without an `approval <id>: ` prefix (the URL names the approval)."""
    text = str(error)
    return text.split(": ", 1)[1] if text.startswith("approval ") and ": " in text else text


@dataclass(frozen=True)
class Refusal:
    """How the API answers one type of library error. `warn`: the log event an operator should
    see (a finding or an outage, not a caller's mistake)."""

    status: int
    code: str
    message: Callable[[Exception], str] = reason
    warn: str | None = None


def _no_call(error: Exception) -> str:
    assert isinstance(error, UnknownCall)
    return f"no call {error.call_id} in run {error.run_id}"


def _no_key(error: Exception) -> str:
    assert isinstance(error, NoActiveKey)
    return f"there is no active {error.purpose.replace('_', '-')} key"


ERROR_TABLE: Mapping[type[SignoffError], Refusal] = {
    UnknownApproval: Refusal(404, "not_found"),
    UnknownCall: Refusal(404, "not_found", _no_call),
    NotInDigest: Refusal(404, "not_found"),
    DecisionNotAllowed: Refusal(403, "forbidden"),
    ApprovalAlreadyDecided: Refusal(409, "conflict"),
    ApprovalExpired: Refusal(409, "expired", lambda e: "the approval expired before a decision"),
    CallStateError: Refusal(409, "conflict"),
    # The database no longer matches the digest: no proof exists (a finding, not a typo).
    DigestMismatch: Refusal(
        409,
        "digest_mismatch",
        lambda e: f"the journal does not match the digest: {e}",
        warn="digest does not match the journal",
    ),
    DigestError: Refusal(422, "invalid"),
    InvalidApprovalRequest: Refusal(422, "invalid"),
    InvalidToolCall: Refusal(422, "invalid"),
    InvalidEvent: Refusal(422, "invalid"),
    NoActiveKey: Refusal(503, "unavailable", _no_key),
    UnknownPolicySet: Refusal(404, "not_found"),
    InvalidPolicySet: Refusal(422, "invalid"),
    PolicyNotPermitted: Refusal(403, "forbidden"),
    PolicyConflict: Refusal(409, "conflict"),
    DatabaseUnavailable: Refusal(
        503,
        "unavailable",
        lambda e: "the database is unavailable; try again",
        warn="database unavailable",
    ),
}
"""Library error type -> the answer; the most derived type listed wins."""


def refusal_of(error: BaseException) -> Refusal | None:
    """The table's answer to `error` (by its most derived type in the table), or None."""
    for kind in type(error).__mro__:
        if (refusal := ERROR_TABLE.get(kind)) is not None:
            return refusal
    return None


def problem(
    status: int,
    code: str,
    message: str,
    headers: Mapping[str, str] | None = None,
    *,
    more: Mapping[str, object] | None = None,
) -> JSONResponse:
    """The one error shape; `more`: fields of a particular refusal beside code and message."""
    return JSONResponse(
        {**(more or {}), "error": code, "message": message},
        status_code=status,
        headers=dict(headers or {}),
    )


def install_error_handlers(app: FastAPI) -> None:
    async def api_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        return problem(exc.status, exc.code, exc.message, exc.headers)

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        code = _CODES.get(exc.status_code, "error")
        message = exc.detail if isinstance(exc.detail, str) else code
        return problem(exc.status_code, code, message, exc.headers)

    async def invalid(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        # Where and what, never the input (it may hold the call's arguments).
        fields = [
            {"loc": list(e.get("loc", ())), "msg": str(e.get("msg", ""))} for e in exc.errors()
        ]
        return JSONResponse(
            {"error": "invalid", "message": "the request is not valid", "fields": fields},
            status_code=422,
        )

    async def refused(request: Request, exc: Exception) -> JSONResponse:
        refusal = refusal_of(exc)
        assert refusal is not None  # registered for the table's types only
        message = refusal.message(exc)
        if refusal.warn is not None:
            log.warning(refusal.warn, error=type(exc).__name__, problem=message)
        return problem(refusal.status, refusal.code, message)

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, invalid)
    for kind in ERROR_TABLE:
        app.add_exception_handler(kind, refused)
