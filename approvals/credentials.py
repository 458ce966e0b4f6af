"""API tokens: who a request to the HTTP service comes from.

A token is `sgf_<token id>_<secret>`: 32 random bytes of secret (base64url), shown once when it
is made. The database keeps only the SHA-256 of the secret (`api_tokens`), so a
copy of the database holds no usable token. Making and revoking tokens is an administrator's (the
owner's login): the row and its `token.created` / `token.revoked` event on the stream
`token:<id>` are written in one transaction, with no secret or hash in the event. The service's
login (`signoff_reviewer` or `signoff_auditor`) only calls `signoff_token_use`, which checks the
hash, revocation and expiry and stamps the token's last use; so does the MCP gateway's, a
worker's (`signoff_app`), for its clients' agent tokens (`authenticate_agent`).

An authenticated caller is an `Identity`: a normalised reviewer id (an agent's principal name for
an agent), a scope (a reviewer decides, an auditor only reads, an agent only talks to the MCP
gateway) and the groups the reviewer directory gives it. Other authenticators (OIDC bearer tokens)
return the same `Identity`.
"""

from __future__ import annotations

import base64
import binascii
import builtins
import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

import asyncpg

from ledger.journal import Journal, NewEvent
from ledger.limits import name_problem
from ledger.log import get_logger
from ledger.store import Database

from . import _sql
from .errors import (
    CredentialExpired,
    CredentialRevoked,
    CredentialScopeRefused,
    InvalidApprovalRequest,
    InvalidCredential,
    UnknownCredential,
)
from .identity import reviewer_id
from .reviewers import directory_groups

__all__ = [
    "MAX_LIFETIME",
    "PREFIX",
    "STREAM_PREFIX",
    "ApiTokens",
    "CreatedToken",
    "Identity",
    "Scope",
    "TokenInfo",
    "secret_hash",
]

log = get_logger(__name__)

PREFIX = "sgf"
STREAM_PREFIX = "token:"
MAX_LIFETIME = timedelta(days=366)
"""Longest a token may be valid: every token expires."""
_SECRET_BYTES = 32
_ID = re.compile(r"[a-z0-9]{8,64}")
# The secret as base64url without padding: 43 characters for 32 bytes.
_TOKEN = re.compile(rf"{PREFIX}_([a-z0-9]{{8,64}})_([A-Za-z0-9_-]{{43}})")


class Scope(StrEnum):
    """What a token allows: a reviewer sees and decides what its policies admit; an auditor
    reads and never decides; an agent (an MCP client of `signoff mcp`) is admitted by the
    gateway alone, and the HTTP service refuses it as it refuses an invalid token."""

    REVIEWER = "reviewer"
    AUDITOR = "auditor"
    AGENT = "agent"


@dataclass(frozen=True)
class Identity:
    """An authenticated caller of the service.

    Attributes:
        reviewer: the normalised reviewer id (`identity.reviewer_id`) it acts as; for an
            agent, the agent's principal name, normalised the same way.
        scope: reviewer, auditor or agent.
        groups: the reviewer directory's groups of `reviewer` when it authenticated (none for
            an auditor, an agent, or a reviewer the directory does not hold). A decision reads
            them again in its own transaction.
        credential: what authenticated it (`token:<id>`), for logs and records; never a secret.
        listed: whether the reviewer directory held `reviewer` when it authenticated: a policy
            that names nobody admits only the directory's reviewers.
    """

    reviewer: str
    scope: Scope
    groups: frozenset[str] = frozenset()
    credential: str = ""
    listed: bool = False

    @property
    def may_decide(self) -> bool:
        return self.scope is Scope.REVIEWER


@dataclass(frozen=True)
class TokenInfo:
    """One token as `tokens list` shows it: never its secret or hash."""

    token_id: str
    reviewer: str
    scope: Scope
    created_by: str
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None
    last_used_at: datetime | None

    def to_json(self) -> dict[str, Any]:
        def when(value: datetime | None) -> str | None:
            return None if value is None else value.isoformat()

        return {
            "token_id": self.token_id,
            "reviewer": self.reviewer,
            "scope": str(self.scope),
            "created_by": self.created_by,
            "created_at": when(self.created_at),
            "expires_at": when(self.expires_at),
            "revoked_at": when(self.revoked_at),
            "last_used_at": when(self.last_used_at),
        }


@dataclass(frozen=True)
class CreatedToken:
    """A new token: `token` is the only copy of its secret (show it once, store it nowhere)."""

    token: str
    info: TokenInfo

    def __repr__(self) -> str:  # a repr in a log or traceback must not hold the secret
        return f"CreatedToken(token_id={self.info.token_id!r})"


def secret_hash(secret: bytes) -> bytes:
    """What the database keeps of a token's secret."""
    return hashlib.sha256(secret).digest()


def _info(row: Any) -> TokenInfo:
    return TokenInfo(
        token_id=row["token_id"],
        reviewer=row["reviewer"],
        scope=Scope(row["scope"]),
        created_by=row["created_by"],
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        revoked_at=row["revoked_at"],
        last_used_at=row["last_used_at"],
    )


def parse_token(token: object) -> tuple[str, bytes]:
    """The token id and the secret of a token's text.

    Raises:
        InvalidCredential: not the text of a token.
    """
    match = _TOKEN.fullmatch(token) if isinstance(token, str) else None
    if match is None:
        raise InvalidCredential()
    try:
        secret = base64.urlsafe_b64decode(match.group(2) + "=")
    except (binascii.Error, ValueError) as e:
        raise InvalidCredential() from e
    if len(secret) != _SECRET_BYTES:
        raise InvalidCredential()
    # The last character's two low bits are padding: four spellings decode to one secret. Only
    # the one the token was issued with authenticates, so a credential has one text.
    if base64.urlsafe_b64encode(secret).decode().rstrip("=") != match.group(2):
        raise InvalidCredential()
    return match.group(1), secret


class ApiTokens:
    """The API tokens of one database. `create`, `revoke` and `list` are the owner's (an
    administrator's login); `authenticate` runs on the service's login, `authenticate_agent`
    on the MCP gateway's (a worker's)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.journal = Journal(db)

    async def create(
        self,
        reviewer: str,
        *,
        scope: Scope | str = Scope.REVIEWER,
        expires_in: timedelta = timedelta(days=30),
        by: str,
    ) -> CreatedToken:
        """Make a token for `reviewer` (journaled as `token.created`, without the secret): a
        reviewer's or an auditor's id, or an agent's principal name with `scope` agent.

        Raises:
            InvalidReviewerId: the reviewer id is refused (`identity.reviewer_id`).
            InvalidApprovalRequest: an unknown scope, a lifetime not above zero or above
                `MAX_LIFETIME`, `by` no usable name.
            PermissionDenied: this login is not the owner.
        """
        rid = reviewer_id(reviewer)
        try:
            scope = Scope(scope)
        except ValueError as e:
            raise InvalidApprovalRequest(
                f"scope must be reviewer, auditor or agent, not {scope!r}"
            ) from e
        if not isinstance(expires_in, timedelta) or not timedelta(0) < expires_in <= MAX_LIFETIME:
            raise InvalidApprovalRequest(
                f"a token's lifetime is more than 0 and at most {MAX_LIFETIME.days} days"
            )
        if (problem := name_problem(by)) is not None:
            raise InvalidApprovalRequest(f"by {problem}")
        token_id = secrets.token_hex(8)
        secret = secrets.token_bytes(_SECRET_BYTES)
        now = datetime.now(UTC)
        expires_at = now + expires_in
        data = {
            "token_id": token_id,
            "reviewer": rid,
            "scope": str(scope),
            "at": now.isoformat(),
            "expires_at": expires_at.isoformat(),
        }
        async with self.db.transaction() as conn:
            await conn.execute(
                _sql.TOKEN_INSERT,
                token_id,
                secret_hash(secret),
                rid,
                str(scope),
                by,
                now,
                expires_at,
            )
            await self._journaled(conn, token_id, 0, NewEvent("token.created", data, actor=by))
            row = await conn.fetchrow(_sql.TOKEN_BY_ID, token_id)
        text = f"{PREFIX}_{token_id}_{base64.urlsafe_b64encode(secret).decode().rstrip('=')}"
        log.info("api token created", token_id=token_id, reviewer=rid, scope=str(scope))
        return CreatedToken(text, _info(row))

    async def revoke(self, token_id: str, *, by: str) -> TokenInfo:
        """Revoke a token (journaled as `token.revoked`): it authenticates nobody from now on.
        Revoking a revoked token records nothing.

        Raises:
            UnknownCredential: no such token.
            InvalidApprovalRequest: `by` is no usable name.
            PermissionDenied: this login is not the owner.
        """
        tid = _token_id(token_id)
        if (problem := name_problem(by)) is not None:
            raise InvalidApprovalRequest(f"by {problem}")
        async with self.db.transaction() as conn:
            row = await conn.fetchrow(_sql.TOKEN_LOCKED, tid)
            if row is None:
                raise UnknownCredential(tid)
            if row["revoked_at"] is not None:
                return _info(row)
            now = datetime.now(UTC)
            await conn.execute(_sql.TOKEN_REVOKE, tid, now)
            version = await self.journal.stream_version(STREAM_PREFIX + tid, connection=conn)
            event = NewEvent("token.revoked", {"token_id": tid, "at": now.isoformat()}, actor=by)
            await self._journaled(conn, tid, version, event)
            row = await conn.fetchrow(_sql.TOKEN_BY_ID, tid)
        log.info("api token revoked", token_id=tid)
        return _info(row)

    async def get(self, token_id: str) -> TokenInfo:
        """One token (the owner's or an auditor's view of it, without the hash).

        Raises:
            UnknownCredential: no such token.
        """
        tid = _token_id(token_id)
        async with self.db.connection() as conn:
            row = await conn.fetchrow(_sql.TOKEN_BY_ID, tid)
        if row is None:
            raise UnknownCredential(tid)
        return _info(row)

    async def list(self, *, include_inactive: bool = False) -> builtins.list[TokenInfo]:
        """The tokens that authenticate (with `include_inactive`, revoked and expired ones too),
        oldest first. Never a secret."""
        async with self.db.connection() as conn:
            rows = await conn.fetch(_sql.TOKEN_LIST, bool(include_inactive))
        return [_info(r) for r in rows]

    async def active_count(self) -> int:
        """How many tokens authenticate now (on the service's login too)."""
        async with self.db.connection() as conn:
            count: int = await conn.fetchval(_sql.TOKENS_ACTIVE)
        return count

    async def authenticate(self, token: str) -> Identity:
        """Who `token` stands for, in whichever scope; stamps its last use. Needs EXECUTE on
        `signoff_token_use` (`signoff_reviewer`, `signoff_auditor`, `signoff_app`). Whoever
        calls it admits only the scopes it serves (the HTTP service refuses agents).

        Raises:
            InvalidCredential: malformed, unknown, or the wrong secret.
            CredentialRevoked, CredentialExpired: a real token that no longer authenticates.
        """
        token_id, secret = parse_token(token)
        async with self.db.connection() as conn:
            row = await _used(conn, token_id, secret)
            scope = Scope(row["scope"])
            groups = (
                await directory_groups(conn, row["reviewer"]) if scope is Scope.REVIEWER else None
            )
        return Identity(
            reviewer=row["reviewer"],
            scope=scope,
            groups=groups or frozenset(),
            credential=STREAM_PREFIX + token_id,
            listed=groups is not None,
        )

    async def authenticate_agent(self, token: str) -> Identity:
        """Which agent `token` stands for: how the MCP gateway checks its clients. Stamps the
        token's last use. Works on a login with only `signoff_app`; never reads the reviewer
        directory (an agent has no groups).

        Raises:
            InvalidCredential: malformed, unknown, or the wrong secret.
            CredentialRevoked, CredentialExpired: a real token that no longer authenticates.
            CredentialScopeRefused: a reviewer's or an auditor's token: it admits no agent.
        """
        token_id, secret = parse_token(token)
        async with self.db.connection() as conn:
            row = await _used(conn, token_id, secret)
        credential = STREAM_PREFIX + token_id
        if row["scope"] != Scope.AGENT:
            raise CredentialScopeRefused(credential, row["scope"], str(Scope.AGENT))
        return Identity(reviewer=row["reviewer"], scope=Scope.AGENT, credential=credential)

    async def _journaled(
        self, conn: asyncpg.Connection, token_id: str, version: int, event: NewEvent
    ) -> None:
        await self.journal.append(
            STREAM_PREFIX + token_id, [event], expected_version=version, connection=conn
        )


async def _used(conn: asyncpg.Connection, token_id: str, secret: bytes) -> Any:
    """The `signoff_token_use` row of a token that authenticates.

    Raises:
        InvalidCredential, CredentialRevoked, CredentialExpired: it does not.
    """
    row = await conn.fetchrow(_sql.TOKEN_USE, token_id, secret_hash(secret))
    status = row["status"]
    if status == "revoked":
        raise CredentialRevoked(token_id)
    if status == "expired":
        raise CredentialExpired(token_id)
    if status != "valid":
        raise InvalidCredential()
    return row


def _token_id(value: object) -> str:
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise UnknownCredential(str(value)[:80])
    return value
