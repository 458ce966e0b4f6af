"""The API's errors: one JSON shape, `{"error": CODE, "message": TEXT}`, for every refusal.

Handlers turn `ApiError`, the framework's HTTP errors and validation errors into it; a library
error that reaches a handler unmapped is a 500 whose message names no value (its type only is
logged).
"""

from __future__ import annotations

from collections.abc import Mapping

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ledger.errors import DatabaseUnavailable
from ledger.log import get_logger

__all__ = ["ApiError", "install_error_handlers", "problem"]

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


def problem(
    status: int, code: str, message: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        {"error": code, "message": message}, status_code=status, headers=dict(headers or {})
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

    async def unavailable(request: Request, exc: Exception) -> JSONResponse:
        log.warning("database unavailable", error=type(exc).__name__)
        return problem(503, "unavailable", "the database is unavailable; try again")

    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(DatabaseUnavailable, unavailable)
