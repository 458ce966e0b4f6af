"""Who is calling: bearer credentials turned into an `approvals.Identity`.

Every request to the API carries `Authorization: Bearer <credential>`, or, from the web inbox,
the session cookie (`cookies.session_cookie`, which holds the credential itself) when there is no
`Authorization` header; an unsafe request (not GET, HEAD or OPTIONS) authenticated by the cookie
must carry `X-CSRF-Token` (`csrf.CsrfKey`), else it is 403. An `Authenticator` says
whether a credential is its kind (`accepts`) and who it stands for (`authenticate`); the first
that accepts it decides, and no other is tried. API tokens (`sgf_...`) are checked in the
database; OIDC / JWT bearer tokens (three dot-separated parts, never `sgf...`) by the
`OidcVerifier` of `Settings.oidc`. A refused credential is answered with one message whatever
the reason (the reason is logged, never the credential); a JWKS that cannot be had is 503.

Whichever credential authenticates, a reviewer's groups are the reviewer directory's: a
token's groups claim grants no policy group (the store reads the directory again when it
records a decision, so a group only the token names could show an approval that deciding
then refuses). The claim decides only who is an auditor (`SIGNOFF_OIDC_AUDITOR_GROUP`) or an
agent (`SIGNOFF_OIDC_AGENT_GROUP`).

An agent's credential (an API token of scope agent, or a JWT of the agent group) is for the MCP
gateway (`signoff mcp`): here it authenticates nobody, refused like an invalid one (401, the one
message), the reason logged.

Guessing is throttled (`limits.FailureLimiter`): refused credentials spend their client
address's budget, and an address with none left gets 429 for any credential, which is then
not checked at all. The address is the connection's peer (no forwarded header is trusted).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from fastapi import Request

from approvals import ApiTokens, CredentialError, CredentialScopeRefused, Identity, Scope
from approvals.credentials import PREFIX
from approvals.reviewers import directory_groups
from ledger.log import get_logger
from ledger.store import Database

from .cookies import session_cookie
from .csrf import CSRF_HEADER, CsrfKey
from .errors import ApiError
from .limits import FailureLimiter, client_key, retry_after_header
from .metrics import Metrics
from .oidc import InvalidBearerToken, JwksUnavailable, OidcVerifier

__all__ = [
    "ApiTokenAuthenticator",
    "Authentication",
    "Authenticator",
    "OidcAuthenticator",
    "bearer_credential",
]

log = get_logger(__name__)

_CHALLENGE = 'Bearer realm="signoff"'
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@runtime_checkable
class Authenticator(Protocol):
    """One kind of bearer credential."""

    def accepts(self, credential: str) -> bool:
        """Whether `credential` is of this kind (by its form alone, no I/O)."""
        ...

    async def authenticate(self, credential: str) -> Identity:
        """Who `credential` stands for.

        Raises:
            CredentialError, InvalidBearerToken: it authenticates nobody (malformed, unknown,
                expired, revoked, a bad signature, another audience...).
            JwksUnavailable: it cannot be checked now (the identity provider's keys).
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


class OidcAuthenticator:
    """OIDC / JWT bearer tokens, checked by `verifier`; the reviewer's groups come from the
    reviewer directory of `db`, never from the token."""

    def __init__(self, verifier: OidcVerifier, db: Database) -> None:
        self.verifier, self.db = verifier, db

    def accepts(self, credential: str) -> bool:
        # A JWS in compact form; `sgf...` are Signoff's own (API and development tokens).
        return not credential.startswith(PREFIX) and credential.count(".") == 2

    async def authenticate(self, credential: str) -> Identity:
        verified = await self.verifier.verify(credential)
        scope = Scope(verified.scope)
        groups = None
        if scope is Scope.REVIEWER:
            async with self.db.connection() as conn:
                groups = await directory_groups(conn, verified.reviewer)
        return Identity(
            verified.reviewer, scope, groups or frozenset(), "oidc", listed=groups is not None
        )


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
    decides. Refused credentials spend their address's budget in `limiter` (a limiter of its
    own when none is given); `metrics` counts refusals and 429s. `csrf` checks the CSRF token
    of requests authenticated by the session cookie (without it, the cookie is not accepted)."""

    def __init__(
        self,
        authenticators: Sequence[Authenticator],
        *,
        csrf: CsrfKey | None = None,
        limiter: FailureLimiter | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        if not authenticators:
            raise ValueError("the service needs at least one authenticator")
        self.authenticators = tuple(authenticators)
        self.csrf = csrf
        self.limiter = limiter or FailureLimiter()
        self.metrics = metrics or Metrics()

    async def identify(self, request: Request) -> Identity:
        """The caller of `request`: its bearer credential, else its session cookie.

        Raises:
            ApiError: 401 (no credential, or one that authenticates nobody); 403 for an unsafe
                request authenticated by the cookie without its CSRF token; 429 when the
                client's address has had too many credentials refused (this one is not
                checked); 503 when it cannot be checked now (no JWKS).
        """
        return await self.authenticate(request, await self._credential(request))

    async def _credential(self, request: Request) -> str:
        if "authorization" in request.headers or self.csrf is None:
            return bearer_credential(request)
        credential = request.cookies.get(session_cookie(request))
        if not credential:
            return bearer_credential(request)  # the 401 it gives
        if request.method not in _SAFE_METHODS and not await self.csrf.check(
            credential, request.headers.get(CSRF_HEADER)
        ):
            raise ApiError(
                403, "forbidden", f"a request signed in by the inbox's cookie needs {CSRF_HEADER}"
            )
        return credential

    async def authenticate(self, request: Request, credential: str) -> Identity:
        """Who `credential`, presented by `request`'s client, stands for (signing in to the
        inbox presents one in a body); a refusal spends the client address's budget.

        Raises:
            ApiError: 401 when it authenticates nobody; 429 when the address has had too many
                refused; 503 when it cannot be checked now.
        """
        address = client_key(request.client.host if request.client else None)
        if (wait := self.limiter.retry_after(address)) is not None:
            self.metrics.rate_limited.inc()
            log.info(
                "credential not checked: too many refused",
                client=address,
                retry_after=round(wait, 1),
            )
            raise ApiError(
                429,
                "rate_limited",
                "too many invalid tokens from this address; try again later",
                headers={"Retry-After": retry_after_header(wait)},
            )
        try:
            return await self._authenticate(credential)
        except ApiError as e:
            if e.status == 401:
                self.limiter.failed(address)
                self.metrics.auth_failures.inc()
            raise

    async def _authenticate(self, credential: str) -> Identity:
        for authenticator in self.authenticators:
            if authenticator.accepts(credential):
                try:
                    return _admitted(await authenticator.authenticate(credential))
                except (CredentialError, InvalidBearerToken) as e:
                    reason = e.reason if isinstance(e, InvalidBearerToken) else type(e).__name__
                    log.info("credential refused", reason=reason, problem=str(e))
                    raise unauthenticated(CredentialError.PUBLIC_MESSAGE) from None
                except JwksUnavailable as e:
                    log.warning("credential not checked", source=e.source, problem=e.problem)
                    raise ApiError(
                        503,
                        "unavailable",
                        "bearer tokens cannot be checked now (the identity provider's keys); "
                        "try again",
                        headers={"Retry-After": "10"},
                    ) from None
        log.info("credential refused", reason="no authenticator accepts its form")
        raise unauthenticated(CredentialError.PUBLIC_MESSAGE)


def _admitted(identity: Identity) -> Identity:
    """`identity`, unless it is an agent's: agents talk to the MCP gateway, never to this
    service, so an agent holding its credential can neither read nor decide here.

    Raises:
        CredentialScopeRefused: an agent's identity.
    """
    if identity.scope is Scope.AGENT:
        raise CredentialScopeRefused(identity.credential, identity.scope, "reviewer or auditor")
    return identity
