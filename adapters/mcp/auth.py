"""Who calls the gateway over HTTP: an agent token (`signoff tokens create --scope agent`) or an
OIDC bearer token whose groups make it an agent, checked by the verifiers `signoff serve` uses.
A reviewer's or an auditor's token admits nobody here; the principal is the token's name, never
something the client says."""

from __future__ import annotations

from mcp.server.auth.provider import AccessToken

from adapters.http.oidc import InvalidBearerToken, JwksUnavailable, OidcVerifier
from approvals import ApiTokens, CredentialError, CredentialScopeRefused, Scope
from approvals.credentials import PREFIX
from ledger.log import get_logger
from ledger.store import Database
from ledger.store.settings import Settings

__all__ = ["AgentVerifier", "agent_verifier"]

log = get_logger(__name__)

AGENT_SCOPE = str(Scope.AGENT)


class AgentVerifier:
    """The SDK's `TokenVerifier`: None (a 401 with a Bearer challenge) for anything but an
    agent's valid token."""

    def __init__(self, tokens: ApiTokens, oidc: OidcVerifier | None) -> None:
        self.tokens, self.oidc = tokens, oidc

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            principal = await self._principal(token)
        except (CredentialError, InvalidBearerToken) as e:
            reason = e.reason if isinstance(e, InvalidBearerToken) else type(e).__name__
            log.info("gateway credential refused", reason=reason)
            return None
        except JwksUnavailable as e:
            log.warning("gateway credential not checked", source=e.source, problem=e.problem)
            return None
        if principal is None:
            log.info("gateway credential refused", reason="no verifier accepts its form")
            return None
        # The secret stays out of the request's context: nothing downstream needs it.
        return AccessToken(token="", client_id=principal, scopes=[AGENT_SCOPE])

    async def _principal(self, token: str) -> str | None:
        if token.startswith(f"{PREFIX}_"):
            return (await self.tokens.authenticate_agent(token)).reviewer
        if self.oidc is not None and token.count(".") == 2:
            verified = await self.oidc.verify(token)
            if verified.scope != AGENT_SCOPE:
                raise CredentialScopeRefused("oidc", verified.scope, AGENT_SCOPE)
            return verified.reviewer
        return None


def agent_verifier(settings: Settings, db: Database) -> AgentVerifier:
    """The verifier of `settings`: agent tokens in `db`, and OIDC when `settings.oidc` is set."""
    oidc = None if settings.oidc is None else OidcVerifier(settings.oidc)
    return AgentVerifier(ApiTokens(db), oidc)
