"""OIDC / JWT bearer tokens: verified against the configured issuer, audience and JWKS, and
mapped to a reviewer id, groups and a scope (auditors and agents by their groups).

`OidcVerifier(settings.oidc)` reads a JWKS file at once (a missing or unusable file is a
`ConfigurationError`); a JWKS URL is fetched on first use. Either is read again when a token
names a key it does not hold (a key rotation), and when the keys are older than `max_age`; at
most once per `refresh_interval` however many tokens ask, so that made-up key ids cannot turn
the service into a load on the identity provider. Fetching runs in a thread, never on the event
loop. When a refresh fails the keys already held stay in use.

Only asymmetric algorithms are accepted (`OidcSettings.algorithms`), each only with a key of
its kind: a key's own `alg` must match the token's, an HMAC or `none` token is refused before
any key is looked at, and JWKS entries that are symmetric (`oct`), private, or RSA shorter than
2048 bits are never used. `exp`, `iss` and `aud` are required.

Every refusal is an `InvalidBearerToken` with a `reason` (the HTTP layer answers 401); a JWKS
that cannot be had is `JwksUnavailable` (503). Neither carries the token, and nothing here logs
it.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal, get_args
from urllib.parse import urlsplit

import jwt
from jwt import exceptions as jwt_errors

from approvals.errors import InvalidReviewerId
from approvals.identity import group_name, reviewer_id
from ledger.errors import ConfigurationError, SignoffError
from ledger.log import get_logger
from ledger.store.config import is_loopback
from ledger.store.settings import OidcSettings

__all__ = [
    "REASONS",
    "InvalidBearerToken",
    "JwksUnavailable",
    "OidcIdentity",
    "OidcVerifier",
    "Reason",
    "Scope",
]

log = get_logger(__name__)

Scope = Literal["reviewer", "auditor", "agent"]
Reason = Literal[
    "malformed",
    "disallowed_algorithm",
    "unknown_key",
    "bad_signature",
    "expired",
    "not_yet_valid",
    "wrong_issuer",
    "wrong_audience",
    "missing_claim",
    "invalid_claim",
]
REASONS: Final[tuple[Reason, ...]] = get_args(Reason)

MAX_TOKEN_BYTES: Final = 16 * 1024
"""Longest token looked at: identity providers' tokens are a few KiB even with many groups."""
MAX_JWKS_BYTES: Final = 1024 * 1024
MAX_GROUPS: Final = 1024
_MIN_RSA_BITS: Final = 2048
_PRIVATE_MEMBERS: Final = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth", "k"})
_CURVES: Final = {"ES256": "P-256", "ES384": "P-384", "ES512": "P-521"}
_MISSING: Final = object()


class InvalidBearerToken(SignoffError):
    """A bearer token was refused; `reason` says why (one of `REASONS`).

    The message says what was wrong with it, never what the token was.
    """

    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(f"bearer token refused ({reason}): {detail}")
        self.reason: Reason = reason
        self.detail = detail


class JwksUnavailable(SignoffError):
    """The JWKS could not be had (unreachable, an HTTP error, not a key set, no usable key):
    tokens cannot be checked until it can. `source` is the URL or file."""

    def __init__(self, source: str, problem: str) -> None:
        super().__init__(f"JWKS {source}: {problem}")
        self.source = source
        self.problem = problem


@dataclass(frozen=True, slots=True)
class OidcIdentity:
    """Who a verified token names: a reviewer id (normal form), their groups (normal form,
    without `group:`), the scope they act in, and when the token expires (UTC)."""

    reviewer: str
    groups: tuple[str, ...]
    scope: Scope
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class _Key:
    kid: str | None
    algorithm: str
    key: jwt.PyJWK


@dataclass(frozen=True, slots=True)
class _KeySet:
    keys: tuple[_Key, ...]
    loaded_at: float

    def find(self, kid: str | None, algorithm: str) -> _Key | None:
        """The key `kid` for `algorithm`; a token without a kid matches only a lone candidate."""
        found = [k for k in self.keys if k.algorithm == algorithm and (kid is None or k.kid == kid)]
        return found[0] if len(found) == 1 else None

    def holds(self, kid: str | None) -> bool:
        return kid is not None and any(k.kid == kid for k in self.keys)


class OidcVerifier:
    """Verifies bearer tokens against `settings`; one per process, shared by every request.

    `refresh_interval`: least time between two reads of the JWKS that tokens cause (seconds);
    `max_age`: keys older than this are read again on next use; `timeout`: of one fetch;
    `clock`: monotonic seconds (the tests move it instead of waiting).

    Raises:
        ConfigurationError: the JWKS is a file that cannot be read or holds no usable key, or
            the auditor or the agent group is not a valid group name, or they are one group.
    """

    def __init__(
        self,
        settings: OidcSettings,
        *,
        refresh_interval: float = 10.0,
        max_age: float = 300.0,
        timeout: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self._refresh_interval = refresh_interval
        self._max_age = max_age
        self._timeout = timeout
        self._clock = clock
        self._source = settings.jwks
        self._auditor_group = _group_setting("SIGNOFF_OIDC_AUDITOR_GROUP", settings.auditor_group)
        self._agent_group = _group_setting("SIGNOFF_OIDC_AGENT_GROUP", settings.agent_group)
        if self._agent_group is not None and self._agent_group == self._auditor_group:
            raise ConfigurationError(
                "SIGNOFF_OIDC_AGENT_GROUP is SIGNOFF_OIDC_AUDITOR_GROUP: agents and auditors "
                "are told apart by their groups"
            )
        self._keys: _KeySet | None = None
        self._last_attempt: float | None = None
        self._last_problem: str | None = None
        self._lock = asyncio.Lock()
        if settings.jwks_file is not None:
            try:
                self._keys = self._load()
            except JwksUnavailable as e:
                raise ConfigurationError(f"SIGNOFF_OIDC_JWKS: {e}") from e
            self._last_attempt = self._keys.loaded_at

    @property
    def keys_held(self) -> int:
        """How many usable keys are held (0: none read yet); for a readiness check, which
        should not read the JWKS on every probe."""
        return len(self._keys.keys) if self._keys is not None else 0

    async def refresh(self) -> int:
        """Reads the JWKS now, whatever its age or the refresh interval (at start); the number
        of usable keys.

        Raises:
            JwksUnavailable: it could not be read; the keys held before stay in use.
        """
        async with self._lock:
            return len((await self._reload()).keys)

    async def verify(self, token: str) -> OidcIdentity:
        """The identity `token` stands for.

        Raises:
            InvalidBearerToken: the token is refused (its `reason` says why).
            JwksUnavailable: no keys could be had to check it with.
        """
        if not isinstance(token, str) or not token or len(token) > MAX_TOKEN_BYTES:
            raise InvalidBearerToken("malformed", f"not a JWT of at most {MAX_TOKEN_BYTES} bytes")
        try:
            header = jwt.get_unverified_header(token)
        except jwt_errors.PyJWTError:
            raise InvalidBearerToken("malformed", "not a JWT") from None
        algorithm, kid = header.get("alg"), header.get("kid")
        if not isinstance(algorithm, str) or algorithm not in self.settings.algorithms:
            raise InvalidBearerToken(
                "disallowed_algorithm",
                f"alg {algorithm!r} is not one of {', '.join(self.settings.algorithms)}",
            )
        if kid is not None and not isinstance(kid, str):
            raise InvalidBearerToken("malformed", "its kid is not a string")
        key = await self._key(kid, algorithm)
        claims = self._decode(token, key)
        return self._identity(claims)

    async def _key(self, kid: str | None, algorithm: str) -> _Key:
        keys = await self._fresh_keys()
        if (found := keys.find(kid, algorithm)) is not None:
            return found
        if keys.holds(kid):  # a key of another kind: no new key set will change that
            raise InvalidBearerToken(
                "disallowed_algorithm", f"key {kid!r} does not sign with {algorithm}"
            )
        async with self._lock:
            if self._may_fetch():  # else another token caused a read just now: use its keys
                keys = await self._reload()
            elif self._last_problem is not None:  # the key may be new: it cannot be told
                raise JwksUnavailable(self._source, self._last_problem)
            elif self._keys is not None:
                keys = self._keys
        if (found := keys.find(kid, algorithm)) is not None:
            return found
        raise InvalidBearerToken(
            "unknown_key", f"no {algorithm} key {kid!r} in the JWKS" if kid else "no kid"
        )

    async def _fresh_keys(self) -> _KeySet:
        """The keys held, read again first when there are none or they are older than
        `max_age` (then a failed read keeps the old ones)."""
        keys = self._keys
        if keys is not None and self._clock() - keys.loaded_at < self._max_age:
            return keys
        async with self._lock:
            if self._may_fetch():
                try:
                    return await self._reload()
                except JwksUnavailable:
                    if self._keys is None:
                        raise
            if self._keys is None:
                raise JwksUnavailable(self._source, self._last_problem or "not read yet")
            return self._keys

    def _may_fetch(self) -> bool:
        last = self._last_attempt
        return last is None or self._clock() - last >= self._refresh_interval

    async def _reload(self) -> _KeySet:
        """Reads the JWKS (the caller holds the lock) and keeps it; a failure is logged and
        raised, and the keys held before stay."""
        self._last_attempt = self._clock()
        try:
            keys = await asyncio.to_thread(self._load)
        except JwksUnavailable as e:
            self._last_problem = e.problem
            log.warning("JWKS not read", source=self._source, problem=e.problem)
            raise
        before = {k.kid for k in self._keys.keys} if self._keys is not None else set()
        self._keys, self._last_problem = keys, None
        if added := sorted(str(k.kid) for k in keys.keys if k.kid not in before):
            log.info("JWKS read", source=self._source, keys=len(keys.keys), added=added)
        return keys

    def _load(self) -> _KeySet:
        path = self.settings.jwks_file
        body = self._read_file(path) if path is not None else self._download(self._source)
        try:
            document = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise JwksUnavailable(self._source, "is not JSON") from None
        return _KeySet(_parse_jwks(self._source, document, self.settings.algorithms), self._clock())

    def _read_file(self, path: Path) -> bytes:
        try:
            with path.open("rb") as f:
                body = f.read(MAX_JWKS_BYTES + 1)
        except OSError as e:
            raise JwksUnavailable(self._source, f"cannot be read: {e.strerror or e}") from None
        if len(body) > MAX_JWKS_BYTES:
            raise JwksUnavailable(self._source, f"is larger than {MAX_JWKS_BYTES} bytes")
        return body

    def _download(self, url: str) -> bytes:
        handlers: list[urllib.request.BaseHandler] = [_NoRedirects()]
        if is_loopback(urlsplit(url).hostname or ""):  # a proxy in the environment is for others
            handlers.append(urllib.request.ProxyHandler({}))
        opener = urllib.request.build_opener(*handlers)
        request = urllib.request.Request(
            url, headers={"Accept": "application/jwk-set+json, application/json"}
        )
        try:
            with opener.open(request, timeout=self._timeout) as response:
                body: bytes = response.read(MAX_JWKS_BYTES + 1)
        except urllib.error.HTTPError as e:
            raise JwksUnavailable(url, f"answered HTTP {e.code}") from None
        except urllib.error.URLError as e:
            raise JwksUnavailable(url, f"cannot be reached: {e.reason}") from None
        except TimeoutError:
            raise JwksUnavailable(url, f"no answer within {self._timeout:g} s") from None
        except (OSError, http.client.HTTPException, ValueError) as e:
            raise JwksUnavailable(url, f"cannot be read: {type(e).__name__}: {e}") from None
        if len(body) > MAX_JWKS_BYTES:
            raise JwksUnavailable(url, f"is larger than {MAX_JWKS_BYTES} bytes")
        return body

    def _decode(self, token: str, key: _Key) -> dict[str, Any]:
        settings = self.settings
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=[key.algorithm],
                audience=list(settings.audiences),
                issuer=settings.issuer,
                leeway=settings.leeway_seconds,
                options={
                    "require": ["exp", "iss", "aud"],
                    "verify_signature": True,
                    "verify_exp": True,
                    "verify_nbf": True,
                    "verify_iat": True,
                    "verify_iss": True,
                    "verify_aud": True,
                },
            )
        except jwt_errors.InvalidSignatureError:
            raise InvalidBearerToken("bad_signature", f"not signed by key {key.kid!r}") from None
        except jwt_errors.ExpiredSignatureError:
            raise InvalidBearerToken("expired", "its exp has passed") from None
        except jwt_errors.ImmatureSignatureError:
            raise InvalidBearerToken("not_yet_valid", "its nbf or iat is in the future") from None
        except jwt_errors.InvalidIssuerError:
            raise InvalidBearerToken("wrong_issuer", f"not issued by {settings.issuer}") from None
        except jwt_errors.InvalidAudienceError:
            raise InvalidBearerToken(
                "wrong_audience", f"not for {', '.join(settings.audiences)}"
            ) from None
        except jwt_errors.MissingRequiredClaimError as e:
            raise InvalidBearerToken("missing_claim", f"it has no {e.claim} claim") from None
        except jwt_errors.InvalidAlgorithmError:
            raise InvalidBearerToken(
                "disallowed_algorithm", f"key {key.kid!r} does not sign with this alg"
            ) from None
        except jwt_errors.PyJWTError as e:  # DecodeError, a claim of the wrong type, ...
            raise InvalidBearerToken("malformed", type(e).__name__) from None
        return claims

    def _identity(self, claims: Mapping[str, Any]) -> OidcIdentity:
        settings = self.settings
        name = settings.reviewer_claim
        value = _claim(claims, name)
        if value is _MISSING or value is None:
            raise InvalidBearerToken("missing_claim", f"it has no {name} claim")
        # An address the provider has not verified is one anybody can type in.
        if name == "email" and claims.get("email_verified") in (False, "false"):
            raise InvalidBearerToken("invalid_claim", "its email is not verified")
        try:
            reviewer = reviewer_id(value)
        except InvalidReviewerId as e:
            raise InvalidBearerToken("invalid_claim", f"{name}: {e}") from None
        groups = self._groups(claims)
        # An agent's is never a person's scope, whatever other group it is in.
        scope: Scope = (
            "agent"
            if self._agent_group in groups
            else "auditor"
            if self._auditor_group in groups
            else "reviewer"
        )
        expires_at = datetime.fromtimestamp(float(claims["exp"]), UTC)
        return OidcIdentity(reviewer=reviewer, groups=groups, scope=scope, expires_at=expires_at)

    def _groups(self, claims: Mapping[str, Any]) -> tuple[str, ...]:
        name = self.settings.groups_claim
        if name is None:
            return ()
        value = _claim(claims, name)
        if value is _MISSING or value is None:  # providers leave the claim out for no groups
            return ()
        if not isinstance(value, list):
            raise InvalidBearerToken("invalid_claim", f"{name} is not a list of strings")
        if len(value) > MAX_GROUPS:
            raise InvalidBearerToken("invalid_claim", f"{name} lists more than {MAX_GROUPS}")
        try:
            return tuple(dict.fromkeys(group_name(g) for g in value))
        except InvalidReviewerId as e:
            raise InvalidBearerToken("invalid_claim", f"{name}: {e}") from None


def _group_setting(variable: str, value: str | None) -> str | None:
    """A configured group in normal form, as tokens' groups are compared."""
    if value is None:
        return None
    try:
        return group_name(value)
    except InvalidReviewerId as e:
        raise ConfigurationError(f"{variable}: {e}") from e


def _claim(claims: Mapping[str, Any], name: str) -> object:
    """Claim `name`: a top-level claim of that name (namespaced claims are URLs, with dots),
    else a dotted path into nested objects."""
    if name in claims:
        return claims[name]
    value: object = claims
    for part in name.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return _MISSING
        value = value[part]
    return value


def _parse_jwks(source: str, document: object, algorithms: Sequence[str]) -> tuple[_Key, ...]:
    """The usable signing keys of a JWKS, one entry per key and algorithm it may verify.

    Raises:
        JwksUnavailable: not a key set, or not one usable key in it.
    """
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise JwksUnavailable(source, 'is not a JWKS (an object with a "keys" list)')
    keys: list[_Key] = []
    skipped = 0
    for jwk in document["keys"]:
        usable = _usable(jwk, algorithms)
        skipped += not usable
        keys.extend(usable)
    if skipped:  # encryption keys, other algorithms: usual, so not a warning
        log.info("JWKS keys skipped", source=source, skipped=skipped)
    if not keys:
        raise JwksUnavailable(source, f"holds no public signing key for {', '.join(algorithms)}")
    return tuple(keys)


def _usable(jwk: object, algorithms: Sequence[str]) -> list[_Key]:
    if not isinstance(jwk, dict) or _PRIVATE_MEMBERS & jwk.keys():
        return []  # a published private or symmetric key is no proof of anything
    if jwk.get("use", "sig") != "sig":
        return []
    ops = jwk.get("key_ops")
    if ops is not None and (not isinstance(ops, list) or "verify" not in ops):
        return []
    kid = jwk.get("kid")
    if kid is not None and not isinstance(kid, str):
        return []
    found = []
    for algorithm in algorithms:
        if not _fits(jwk, algorithm):
            continue
        try:
            key = jwt.PyJWK(jwk, algorithm)
        except (jwt_errors.PyJWTError, TypeError, ValueError):
            return []
        if jwk["kty"] == "RSA" and key.key.key_size < _MIN_RSA_BITS:
            return []
        found.append(_Key(kid, algorithm, key))
    return found


def _fits(jwk: Mapping[str, Any], algorithm: str) -> bool:
    """Whether `jwk` may verify `algorithm`: its kind (and curve) fits, and so does its own
    `alg` when it names one."""
    if jwk.get("alg") not in (None, algorithm):
        return False
    kty, crv = jwk.get("kty"), jwk.get("crv")
    if algorithm.startswith(("RS", "PS")):
        return bool(kty == "RSA")
    if algorithm in _CURVES:
        return kty == "EC" and crv == _CURVES[algorithm]
    return algorithm == "EdDSA" and kty == "OKP" and crv in ("Ed25519", "Ed448")


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A JWKS is fetched from the URL configured, not wherever it points on to."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None
