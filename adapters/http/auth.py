"""Who is calling: bearer credentials turned into an `approvals.Identity`.

Every request to the API carries `Authorization: Bearer <credential>`. An `Authenticator` says
whether a credential is its kind (`accepts`) and who it stands for (`authenticate`); the first
that accepts it decides, and no other is tried. API tokens (`sgf_...`) are checked here; an
OIDC/JWT authenticator plugs in beside them through the same protocol. A refused credential is
answered with one message whatever the reason (the reason is logged, never the credential).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from fastapi import Request

from approvals import ApiTokens, CredentialError, Identity
from approvals.credentials import PREFIX
from ledger.log import get_logger

from .errors import ApiError

__all__ = ["ApiTokenAuthenticator", "Authentication", "Authenticator", "bearer_credential"]

log = get_logger(__name__)

_CHALLENGE = 'Bearer realm="signoff"'


@runtime_checkable
class Authenticator(Protocol):
    """One kind of bearer credential."""

    def accepts(self, credential: str) -> bool:
        """Whether `credential` is of this kind (by its form alone, no I/O)."""
        ...

    async def authenticate(self, credential: str) -> Identity:
        """Who `credential` stands for.

        Raises:
            CredentialError: it authenticates nobody (malformed, unknown, expired, revoked,
                a bad signature, another audience...).
        """
        ...


class ApiTokenAuthenticator:
    """API tokens made with `signoff tokens create`, checked in the database."""

    def __init__(self, tokens: ApiTokens) -> None:
        self.tokens = tokens

    def accepts(self, credential: str) -> bool:
        return credential.startswith(f"{PREFIX}_")

    async def authenticate(self, credential: str) -> Identity:
        return await self.tokens.authenticate(credential)


def bearer_credential(request: Request) -> str:
    """The credential of the request's `Authorization: Bearer` header.

    Raises:
        ApiError: 401, with a `WWW-Authenticate: Bearer` challenge, when there is none.
    """
    header = request.headers.get("authorization")
    if header is None:
        raise unauthenticated("this API needs a bearer token", error=None)
    scheme, _, credential = header.partition(" ")
    credential = credential.strip()
    if scheme.lower() != "bearer" or not credential:
        raise unauthenticated("expected Authorization: Bearer <token>", error="invalid_request")
    return credential


def unauthenticated(message: str, *, error: str | None = "invalid_token") -> ApiError:
    challenge = _CHALLENGE if error is None else f'{_CHALLENGE}, error="{error}"'
    return ApiError(401, "unauthenticated", message, headers={"WWW-Authenticate": challenge})


class Authentication:
    """The service's authenticators, tried in order; the first that accepts a credential
    decides."""

    def __init__(self, authenticators: Sequence[Authenticator]) -> None:
        if not authenticators:
            raise ValueError("the service needs at least one authenticator")
        self.authenticators = tuple(authenticators)

    async def identify(self, request: Request) -> Identity:
        """The caller of `request`.

        Raises:
            ApiError: 401 (no credential, or one that authenticates nobody).
        """
        credential = bearer_credential(request)
        for authenticator in self.authenticators:
            if authenticator.accepts(credential):
                try:
                    return await authenticator.authenticate(credential)
                except CredentialError as e:
                    log.info("credential refused", reason=type(e).__name__, problem=str(e))
                    raise unauthenticated(CredentialError.PUBLIC_MESSAGE) from None
        log.info("credential refused", reason="no authenticator accepts its form")
        raise unauthenticated(CredentialError.PUBLIC_MESSAGE)
