"""OIDC bearer tokens: keys made here, tokens signed here, the JWKS served over real HTTP on
loopback or from a file. No identity provider is involved."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from adapters.http.oidc import (
    REASONS,
    InvalidBearerToken,
    JwksUnavailable,
    OidcIdentity,
    OidcVerifier,
)
from ledger import ConfigurationError
from ledger.store.settings import OidcSettings, Settings

from .support.ports import free_port

ISSUER = "https://idp.example.test/realms/signoff"
AUDIENCE = "signoff"

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey


@dataclass(frozen=True)
class Signer:
    """A key pair of one algorithm, as an identity provider holds it."""

    kid: str
    algorithm: str
    private: PrivateKey

    @classmethod
    def rsa(cls, kid: str, bits: int = 2048) -> Signer:
        return cls(kid, "RS256", rsa.generate_private_key(public_exponent=65537, key_size=bits))

    @classmethod
    def ec(cls, kid: str) -> Signer:
        return cls(kid, "ES256", ec.generate_private_key(ec.SECP256R1()))

    @classmethod
    def ed25519(cls, kid: str) -> Signer:
        return cls(kid, "EdDSA", ed25519.Ed25519PrivateKey.generate())

    def jwk(self, **extra: Any) -> dict[str, Any]:
        public = self.private.public_key()
        if isinstance(public, rsa.RSAPublicKey):
            data = dict(RSAAlgorithm.to_jwk(public, as_dict=True))
        elif isinstance(public, ec.EllipticCurvePublicKey):
            data = dict(ECAlgorithm.to_jwk(public, as_dict=True))
        else:
            data = dict(OKPAlgorithm.to_jwk(public, as_dict=True))
        return {**data, "kid": self.kid, "use": "sig", "alg": self.algorithm, **extra}

    def public_pem(self) -> bytes:
        return self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def token(self, *, header: dict[str, Any] | None = None, **claims: Any) -> str:
        """A token with good claims, overridden by `claims` (None leaves a claim out)."""
        now = int(time.time())
        payload = {"iss": ISSUER, "aud": AUDIENCE, "sub": "ada", "iat": now, "exp": now + 300}
        payload = {k: v for k, v in {**payload, **claims}.items() if v is not None}
        headers = {"kid": self.kid, **(header or {})}
        return jwt.encode(payload, self.private, algorithm=self.algorithm, headers=headers)


def jwks(*signers: Signer) -> dict[str, Any]:
    return {"keys": [s.jwk() for s in signers]}


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def handmade(header: dict[str, Any], payload: dict[str, Any], signature: bytes = b"") -> str:
    """A token put together by hand, for what PyJWT refuses to make."""
    encoded = [b64url(json.dumps(part).encode()) for part in (header, payload)]
    return ".".join([*encoded, b64url(signature)])


def good_claims(**claims: Any) -> dict[str, Any]:
    now = int(time.time())
    return {"iss": ISSUER, "aud": AUDIENCE, "sub": "ada", "iat": now, "exp": now + 300, **claims}


@pytest.fixture(scope="module")
def rsa_key() -> Signer:
    return Signer.rsa("rsa-1")


@pytest.fixture(scope="module")
def ec_key() -> Signer:
    return Signer.ec("ec-1")


@pytest.fixture(scope="module")
def ed_key() -> Signer:
    return Signer.ed25519("ed-1")


@dataclass
class JwksServer:
    """A JWKS endpoint on 127.0.0.1: what it serves can be changed, and it counts its GETs."""

    url: str = ""
    document: dict[str, Any] = field(default_factory=lambda: {"keys": []})
    status: int = 200
    body: bytes | None = None  # served instead of the document when set
    headers: dict[str, str] = field(default_factory=dict)
    fetches: int = 0
    hold: threading.Event | None = None  # when set, each GET waits for it
    arrived: threading.Event = field(default_factory=threading.Event)


@pytest.fixture
def jwks_server() -> Iterator[JwksServer]:
    state = JwksServer()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.fetches += 1
            state.arrived.set()
            if state.hold is not None:
                state.hold.wait(10)
            body = state.body if state.body is not None else json.dumps(state.document).encode()
            self.send_response(state.status)
            for name, value in {"Content-Type": "application/json", **state.headers}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the test output stays the test's

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/realms/signoff/certs"
    try:
        yield state
    finally:
        if state.hold is not None:
            state.hold.set()
        server.shutdown()
        server.server_close()
        thread.join()


class Clock:
    """Monotonic seconds that move only when told (rate limits without waiting)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


Verifier = Callable[..., OidcVerifier]


@pytest.fixture
def verifier(jwks_server: JwksServer, clock: Clock) -> Verifier:
    def make(jwks: str | None = None, timeout: float = 5.0, **settings: Any) -> OidcVerifier:
        oidc = OidcSettings(
            issuer=ISSUER,
            audiences=(AUDIENCE,),
            jwks=jwks or jwks_server.url,
            **settings,
        )
        return OidcVerifier(oidc, refresh_interval=10, max_age=300, timeout=timeout, clock=clock)

    return make


async def refused(verifier: OidcVerifier, token: str) -> str:
    """The reason `verifier` refuses `token`."""
    with pytest.raises(InvalidBearerToken) as caught:
        await verifier.verify(token)
    assert caught.value.reason in REASONS
    return caught.value.reason


# -- accepted tokens ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["rsa", "ec", "ed25519"])
async def test_a_valid_token_of_each_kind_of_key_maps_its_claims_to_an_identity(
    kind: str,
    rsa_key: Signer,
    ec_key: Signer,
    ed_key: Signer,
    jwks_server: JwksServer,
    verifier: Verifier,
) -> None:
    key = {"rsa": rsa_key, "ec": ec_key, "ed25519": ed_key}[kind]
    jwks_server.document = jwks(rsa_key, ec_key, ed_key)
    v = verifier(reviewer_claim="email", groups_claim="groups")
    exp = int(time.time()) + 600
    token = key.token(
        sub="0f7c-uuid",
        email="ada@example.test",
        email_verified=True,
        groups=["finance", "group:payments", "finance"],
        exp=exp,
    )
    identity = await v.verify(token)
    assert identity == OidcIdentity(
        reviewer="ada@example.test",
        groups=("finance", "payments"),
        scope="reviewer",
        expires_at=datetime.fromtimestamp(exp, UTC),
    )
    assert jwks_server.fetches == 1  # fetched once, on first use


async def test_the_reviewer_id_and_groups_are_normalised(
    rsa_key: Signer, jwks_server: JwksServer, verifier: Verifier
) -> None:
    jwks_server.document = jwks(rsa_key)
    v = verifier(groups_claim="groups")
    identity = await v.verify(rsa_key.token(sub="\uff41\uff44\uff41", groups=["  ops "]))
    assert (identity.reviewer, identity.groups) == ("ada", ("ops",))
    assert (await v.verify(rsa_key.token(sub=" ada\n"))).reviewer == "ada"  # as every id


async def test_members_of_the_auditor_group_get_the_auditor_scope(
    rsa_key: Signer, jwks_server: JwksServer, verifier: Verifier
) -> None:
    jwks_server.document = jwks(rsa_key)
    v = verifier(groups_claim="realm_access.roles", auditor_group="signoff-auditors")
    auditor = rsa_key.token(realm_access={"roles": ["signoff-auditors", "staff"]})
    reviewer = rsa_key.token(realm_access={"roles": ["staff"]})
    nobody = rsa_key.token()
    assert (await v.verify(auditor)).scope == "auditor"
    assert (await v.verify(reviewer)).scope == "reviewer"
    assert (await v.verify(nobody)).groups == ()


async def test_members_of_the_agent_group_are_agents_whatever_else_they_are(
    rsa_key: Signer, jwks_server: JwksServer, verifier: Verifier
) -> None:
    jwks_server.document = jwks(rsa_key)
    v = verifier(groups_claim="groups", auditor_group="auditors", agent_group="signoff-agents")
    for groups in (
        ["signoff-agents"],
        ["auditors", "signoff-agents"],
        ["finance", " signoff-agents"],
    ):
        assert (await v.verify(rsa_key.token(groups=groups))).scope == "agent", groups
    assert (await v.verify(rsa_key.token(groups=["auditors"]))).scope == "auditor"
    assert (await v.verify(rsa_key.token(groups=["finance"]))).scope == "reviewer"
    # Without the setting, nobody is an agent through OIDC.
    plain = verifier(groups_claim="groups")
    assert (await plain.verify(rsa_key.token(groups=["signoff-agents"]))).scope == "reviewer"


def test_the_agent_group_is_not_the_auditor_group(verifier: Verifier) -> None:
    with pytest.raises(ConfigurationError, match="SIGNOFF_OIDC_AGENT_GROUP"):
        verifier(groups_claim="groups", auditor_group="bots", agent_group="group:bots")


async def test_a_namespaced_claim_with_dots_is_read_as_one_claim(
    rsa_key: Signer, jwks_server: JwksServer, verifier: Verifier
) -> None:
    jwks_server.document = jwks(rsa_key)
    v = verifier(groups_claim="https://signoff.example/groups")
    claims: dict[str, Any] = {"https://signoff.example/groups": ["finance"]}
    token = rsa_key.token(**claims)
    assert (await v.verify(token)).groups == ("finance",)


async def test_one_of_several_audiences_is_enough(
    rsa_key: Signer, jwks_server: JwksServer, clock: Clock
) -> None:
    jwks_server.document = jwks(rsa_key)
    settings = OidcSettings(ISSUER, ("signoff-web", "signoff-cli"), jwks_server.url)
    v = OidcVerifier(settings, clock=clock)
    token = rsa_key.token(aud=["account", "signoff-cli"])
    assert (await v.verify(token)).reviewer == "ada"


async def test_a_token_without_kid_is_checked_with_the_only_key_of_its_algorithm(
    rsa_key: Signer, ec_key: Signer, jwks_server: JwksServer, verifier: Verifier
) -> None:
    jwks_server.document = {"keys": [rsa_key.jwk(kid=None), ec_key.jwk()]}
    jwks_server.document["keys"][0].pop("kid")
    token = jwt.encode(good_claims(), rsa_key.private, algorithm="RS256")
    assert (await verifier().verify(token)).reviewer == "ada"


# -- refused tokens -----------------------------------------------------------------------------


async def test_an_expired_token_is_refused_beyond_the_leeway_only(
    rsa_key: Signer, jwks_server: JwksServer, verifier: Verifier
) -> None:
    jwks_server.document = jwks(rsa_key)
    v = verifier()
    now = int(time.time())
    assert await refused(v, rsa_key.token(iat=now - 7200, exp=now - 3600)) == "expired"
    # 30 s of leeway by default: a token that expired 5 s ago still passes
    assert (await v.verify(rsa_key.token(exp=now - 5))).reviewer == "ada"
    assert await refused(verifier(leeway_seconds=0), rsa_key.token(exp=now - 5)) == "expired"


async def test_a_token_not_yet_valid_is_refused(
    rsa_key: Signer, jwks_server: JwksServer, verifier: Verifier
) -> None:
    jwks_server.document = jwks(rsa_key)
    v = verifier()
    later = int(time.time()) + 3600
    assert await refused(v, rsa_key.token(nbf=later, exp=later + 300)) == "not_yet_valid"
    assert await refused(v, rsa_key.token(iat=later, exp=later + 300)) == "not_yet_valid"


async def test_a_token_for_another_audience_or_from_another_issuer_is_refused(
    rsa_key: Signer, jwks_server: JwksServer, verifier: Verifier
) -> None:
    jwks_server.document = jwks(rsa_key)
    v = verifier()
    assert await refused(v, rsa_key.token(aud="another-app")) == "wrong_audience"
    assert await refused(v, rsa_key.token(aud=["account"])) == "wrong_audience"
    assert await refused(v, rsa_key.token(iss="https://evil.example.test")) == "wrong_issuer"
    assert await refused(v, rsa_key.token(iss=ISSUER + "/")) == "wrong_issuer"


@pytest.mark.parametrize("claim", ["exp", "iss", "aud"])
async def test_a_token_without_exp_iss_or_aud_is_refused(
    claim: str, rsa_key: Signer, jwks_server: JwksServer, verifier: Verifier
) -> None:
    jwks_server.document = jwks(rsa_key)
    assert await refused(verifier(), rsa_key.token(**{claim: None})) == "missing_claim"


async def test_a_token_signed_by_another_key_or_altered_is_refused(
    rsa_key: Signer, ed_key: Signer, jwks_server: JwksServer, verifier: Verifier
) -> None:
    jwks_server.document = jwks(rsa_key, ed_key)
    v = verifier()
    impostor = Signer.rsa(rsa_key.kid)  # same kid, other key
    assert await refused(v, impostor.token()) == "bad_signature"
    assert await refused(v, Signer.ed25519(ed_key.kid).token()) == "bad_signature"
    header, _, signature = rsa_key.token(sub="ada").split(".")
    altered = ".".join([header, b64url(json.dumps(good_claims(sub="root")).encode()), signature])
    assert await refused(v, altered) == "bad_signature"


async def test_alg_none_is_refused(
    rsa_key: Signer, jwks_server: JwksServer, verifier: Verifier
) -> None:
    jwks_server.document = jwks(rsa_key)
    v = verifier()
    for alg in ("none", "None", "NONE"):
        token = handmade({"alg": alg, "typ": "JWT", "kid": rsa_key.kid}, good_claims())
        assert await refused(v, token) == "disallowed_algorithm"
    assert await refused(v, jwt.encode(good_claims(), "", algorithm="none")) == (
        "disallowed_algorithm"
    )


async def test_an_hmac_token_keyed_with_the_public_key_is_refused(
    rsa_key: Signer, jwks_server: JwksServer, verifier: Verifier
) -> None:
    """The old confusion: a verifier that takes the alg from the token would check an HS256
    "signature" with the published key as the secret, which anybody can make."""
    jwks_server.document = jwks(rsa_key)
    v = verifier()
    header = {"alg": "HS256", "typ": "JWT", "kid": rsa_key.kid}
    encoded = ".".join(b64url(json.dumps(p).encode()) for p in (header, good_claims()))
    for secret in (rsa_key.public_pem(), json.dumps(rsa_key.jwk()).encode()):
        mac = hmac.new(secret, encoded.encode(), hashlib.sha256).digest()
        assert await refused(v, f"{encoded}.{b64url(mac)}") == "disallowed_algorithm"


async def test_a_key_signs_only_with_its_own_algorithm(
    rsa_key: Signer, ec_key: Signer, jwks_server: JwksServer, verifier: Verifier
) -> None:
    jwks_server.document = jwks(rsa_key, ec_key)
    v = verifier()
    # signed by the EC key but naming the RSA key's kid: that key does not do ES256
    token = ec_key.token(header={"kid": rsa_key.kid})
    assert await refused(v, token) == "disallowed_algorithm"
    assert jwks_server.fetches == 1  # a key of another kind is no reason to read the JWKS again
    # an algorithm allowed in general but not configured
    assert await refused(verifier(algorithms=("ES256",)), rsa_key.token()) == (
        "disallowed_algorithm"
    )


async def test_an_rsa_key_without_alg_verifies_each_configured_rsa_algorithm(
    rsa_key: Signer, jwks_server: JwksServer, verifier: Verifier
) -> None:
    jwks_server.document = {"keys": [{k: v for k, v in rsa_key.jwk().items() if k != "alg"}]}
    v = verifier(algorithms=("RS256", "PS256"))
    pss = jwt.encode(good_claims(), rsa_key.private, "PS256", headers={"kid": rsa_key.kid})
    assert (await v.verify(pss)).reviewer == "ada"
    assert (await v.verify(rsa_key.token())).reviewer == "ada"
    jwks_server.document = jwks(rsa_key)  # now the key says RS256: PS256 is not its algorithm
    assert await refused(verifier(algorithms=("RS256", "PS256")), pss) == "disallowed_algorithm"


async def test_malformed_tokens_are_refused(
    rsa_key: Signer, jwks_server: JwksServer, verifier: Verifier
) -> None:
    jwks_server.document = jwks(rsa_key)
    v = verifier()
    for token in ("", "not-a-jwt", "a.b.c", "x" * 20_000, rsa_key.token() + "x" * 20_000):
        assert await refused(v, token) == "malformed"
    assert await refused(v, handmade({"alg": "RS256", "kid": 7}, good_claims())) == "malformed"
    assert await refused(v, rsa_key.token(exp="tomorrow")) == "malformed"
    assert await refused(v, rsa_key.token(sub=["ada"])) == "malformed"  # sub is a string


async def test_the_reviewer_claim_must_be_there_and_be_a_valid_reviewer_id(
    rsa_key: Signer, jwks_server: JwksServer, verifier: Verifier
) -> None:
    jwks_server.document = jwks(rsa_key)
    by_email = verifier(reviewer_claim="email")
    assert await refused(by_email, rsa_key.token()) == "missing_claim"
    assert await refused(by_email, rsa_key.token(email=None)) == "missing_claim"
    for email in ("ada lovelace@example.test", " \t", "ada\u200b@example.test", "group:finance"):
        assert await refused(by_email, rsa_key.token(email=email)) == "invalid_claim"
    assert await refused(by_email, rsa_key.token(email=42)) == "invalid_claim"
    unverified = rsa_key.token(email="ada@example.test", email_verified=False)
    assert await refused(by_email, unverified) == "invalid_claim"
    assert await refused(verifier(), rsa_key.token(sub="ada\u202eevil")) == "invalid_claim"


async def test_the_groups_claim_must_be_a_list_of_valid_group_names(
    rsa_key: Signer, jwks_server: JwksServer, verifier: Verifier
) -> None:
    jwks_server.document = jwks(rsa_key)
    v = verifier(groups_claim="groups")
    for groups in ("finance", {"finance": True}, ["finance", 3], ["two words"], ["x"] * 1025):
        assert await refused(v, rsa_key.token(groups=groups)) == "invalid_claim"


# -- keys: rotation, refresh, outages -----------------------------------------------------------


async def test_an_unknown_kid_reads_the_jwks_again_and_a_rotated_key_is_accepted(
    rsa_key: Signer, jwks_server: JwksServer, verifier: Verifier, clock: Clock
) -> None:
    jwks_server.document = jwks(rsa_key)
    v = verifier()
    assert (await v.verify(rsa_key.token())).reviewer == "ada"
    assert jwks_server.fetches == 1

    rotated = Signer.rsa("rsa-2")
    clock.advance(60)
    assert await refused(v, rotated.token()) == "unknown_key"
    assert jwks_server.fetches == 2  # looked again before refusing
    # at most one read per refresh interval, however many unknown kids come
    for _ in range(5):
        assert await refused(v, Signer.ed25519("made-up").token()) == "unknown_key"
    assert jwks_server.fetches == 2

    jwks_server.document = jwks(rsa_key, rotated)  # the provider publishes its new key
    assert await refused(v, rotated.token()) == "unknown_key"  # still within the interval
    clock.advance(10)
    assert (await v.verify(rotated.token(sub="grace"))).reviewer == "grace"
    assert jwks_server.fetches == 3
    assert (await v.verify(rsa_key.token())).reviewer == "ada"  # the old key still works
    assert jwks_server.fetches == 3

    jwks_server.document = jwks(rotated)  # the old key retired: gone at the next read
    clock.advance(300)
    assert (await v.verify(rotated.token())).reviewer == "ada"
    assert jwks_server.fetches == 4
    assert await refused(v, rsa_key.token()) == "unknown_key"


async def test_concurrent_tokens_with_a_new_kid_read_the_jwks_once(
    rsa_key: Signer, jwks_server: JwksServer, verifier: Verifier, clock: Clock
) -> None:
    jwks_server.document = jwks(rsa_key)
    v = verifier()
    await v.refresh()
    rotated = Signer.ec("ec-2")
    jwks_server.document = jwks(rsa_key, rotated)
    clock.advance(60)
    tokens = [rotated.token(sub=f"r{i}") for i in range(10)]
    identities = await asyncio.gather(*(v.verify(t) for t in tokens))
    assert [i.reviewer for i in identities] == [f"r{i}" for i in range(10)]
    assert jwks_server.fetches == 2


async def test_fetching_the_jwks_does_not_block_the_event_loop(
    rsa_key: Signer, jwks_server: JwksServer, verifier: Verifier
) -> None:
    """The endpoint answers only once this coroutine has run while the fetch waits: a fetch on
    the event loop would hold it until the fetch timed out."""
    jwks_server.document = jwks(rsa_key)
    jwks_server.hold = threading.Event()
    task = asyncio.create_task(verifier().verify(rsa_key.token()))
    assert await asyncio.to_thread(jwks_server.arrived.wait, 10)
    assert not task.done()
    jwks_server.hold.set()
    assert (await task).reviewer == "ada"


async def test_a_jwks_url_that_is_down_is_a_typed_error(
    rsa_key: Signer, verifier: Verifier, clock: Clock
) -> None:
    url = f"http://127.0.0.1:{free_port()}/certs"
    v = verifier(jwks=url)
    assert v.keys_held == 0
    with pytest.raises(JwksUnavailable, match="cannot be reached") as caught:
        await v.verify(rsa_key.token())
    assert caught.value.source == url
    with pytest.raises(JwksUnavailable):  # within the interval: no new attempt, same answer
        await v.verify(rsa_key.token())
    with pytest.raises(JwksUnavailable):
        await v.refresh()


@pytest.mark.parametrize(
    ("status", "body", "headers", "problem"),
    [
        (500, b"oops", {}, "answered HTTP 500"),
        (404, b"{}", {}, "answered HTTP 404"),
        (302, b"", {"Location": "http://127.0.0.1:1/elsewhere"}, "answered HTTP 302"),
        (200, b"<html>login</html>", {}, "is not JSON"),
        (200, b'{"keys": "none"}', {}, "is not a JWKS"),
        (200, b'{"keys": []}', {}, "holds no public signing key"),
        (200, b"[" * (1024 * 1024 + 1), {}, "is larger than"),
    ],
)
async def test_a_jwks_url_that_answers_badly_is_a_typed_error(
    status: int,
    body: bytes,
    headers: dict[str, str],
    problem: str,
    rsa_key: Signer,
    jwks_server: JwksServer,
    verifier: Verifier,
) -> None:
    jwks_server.status, jwks_server.body, jwks_server.headers = status, body, headers
    with pytest.raises(JwksUnavailable, match=problem):
        await verifier().verify(rsa_key.token())


async def test_keys_held_stay_in_use_while_the_jwks_url_is_down(
    rsa_key: Signer, jwks_server: JwksServer, verifier: Verifier, clock: Clock
) -> None:
    jwks_server.document = jwks(rsa_key)
    v = verifier()
    assert (await v.verify(rsa_key.token())).reviewer == "ada"
    jwks_server.status, jwks_server.body = 503, b"maintenance"
    clock.advance(600)  # the keys are due for a read, which fails
    assert (await v.verify(rsa_key.token())).reviewer == "ada"
    assert jwks_server.fetches == 2
    with pytest.raises(JwksUnavailable, match="HTTP 503"):  # a new kid cannot be looked up
        clock.advance(60)
        await v.verify(Signer.rsa("rsa-9").token())
    jwks_server.status, jwks_server.body = 200, None
    assert await v.refresh() == 1 == v.keys_held


@pytest.mark.filterwarnings("ignore:The RSA key is 1024 bits")
async def test_unusable_jwks_entries_are_never_used(
    rsa_key: Signer, ec_key: Signer, jwks_server: JwksServer, verifier: Verifier
) -> None:
    short = Signer.rsa("short", bits=1024)
    private = Signer.rsa("private")
    private_numbers = private.private
    assert isinstance(private_numbers, rsa.RSAPrivateKey)
    d = private_numbers.private_numbers().d
    d_b64 = b64url(d.to_bytes((d.bit_length() + 7) // 8, "big"))
    encrypting = Signer.rsa("enc")
    jwks_server.document = {
        "keys": [
            rsa_key.jwk(),
            short.jwk(),
            private.jwk(d=d_b64),
            encrypting.jwk(use="enc"),
            {"kty": "oct", "kid": "hmac", "k": b64url(b"secret"), "alg": "HS256"},
            {"kty": "RSA", "kid": "broken", "n": "AQAB", "e": 3},
            "not a key",
            ec_key.jwk(key_ops=["encrypt"]),
        ]
    }
    v = verifier()
    assert (await v.verify(rsa_key.token())).reviewer == "ada"
    for signer in (short, private, encrypting, ec_key):
        assert await refused(v, signer.token()) == "unknown_key"
    hs = handmade({"alg": "HS256", "kid": "hmac"}, good_claims())
    assert await refused(v, hs) == "disallowed_algorithm"


async def test_a_jwks_file_is_read_at_start_and_again_for_a_new_kid(
    rsa_key: Signer, ed_key: Signer, tmp_path: Path, verifier: Verifier, clock: Clock
) -> None:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(jwks(rsa_key)))
    v = verifier(jwks=str(path))
    path.unlink()  # read at start: the verifier holds the keys
    assert (await v.verify(rsa_key.token())).reviewer == "ada"

    path.write_text(json.dumps(jwks(rsa_key, ed_key)))
    clock.advance(10)
    assert (await v.verify(ed_key.token(sub="grace"))).reviewer == "grace"


@pytest.mark.parametrize(
    ("content", "problem"),
    [(None, "cannot be read"), ("{", "is not JSON"), ('{"keys": []}', "no public signing key")],
)
def test_a_jwks_file_that_cannot_be_used_at_start_is_a_configuration_error(
    content: str | None, problem: str, tmp_path: Path, verifier: Verifier
) -> None:
    path = tmp_path / "jwks.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigurationError, match=problem) as caught:
        verifier(jwks=str(path))
    assert "SIGNOFF_OIDC_JWKS" in str(caught.value)


async def test_tokens_are_never_in_errors_or_logs(
    rsa_key: Signer, jwks_server: JwksServer, verifier: Verifier, caplog: pytest.LogCaptureFixture
) -> None:
    jwks_server.document = jwks(rsa_key)
    v = verifier(reviewer_claim="email")
    now = int(time.time())
    tokens = [
        rsa_key.token(),  # no email
        rsa_key.token(exp=now - 3600),
        rsa_key.token(aud="other"),
        Signer.rsa(rsa_key.kid).token(),
        Signer.rsa("unknown").token(),
        rsa_key.token(email="a b"),
    ]
    with caplog.at_level(logging.DEBUG, logger="signoff"):
        for token in tokens:
            with pytest.raises(InvalidBearerToken) as caught:
                await v.verify(token)
            signature = token.rsplit(".", 1)[1]
            for text in (str(caught.value), repr(caught.value), caplog.text):
                assert token not in text and signature not in text
            for record in caplog.records:
                assert token not in json.dumps(record.__dict__, default=str)
    assert any("JWKS read" in r.getMessage() for r in caplog.records)


# -- settings -----------------------------------------------------------------------------------


def test_the_oidc_settings_read_every_variable() -> None:
    settings = Settings.from_env(
        {
            "SIGNOFF_OIDC_ISSUER": f" {ISSUER} ",
            "SIGNOFF_OIDC_AUDIENCE": "signoff-web, signoff-cli",
            "SIGNOFF_OIDC_JWKS": "https://idp.example.test/realms/signoff/certs",
            "SIGNOFF_OIDC_REVIEWER_CLAIM": "email",
            "SIGNOFF_OIDC_GROUPS_CLAIM": "groups",
            "SIGNOFF_OIDC_AUDITOR_GROUP": "signoff-auditors",
            "SIGNOFF_OIDC_AGENT_GROUP": "signoff-agents",
            "SIGNOFF_OIDC_ALGORITHMS": "rs256,PS256,eddsa",
            "SIGNOFF_OIDC_LEEWAY_SECONDS": "10",
        }
    )
    assert settings.oidc == OidcSettings(
        issuer=ISSUER,
        audiences=("signoff-web", "signoff-cli"),
        jwks="https://idp.example.test/realms/signoff/certs",
        reviewer_claim="email",
        groups_claim="groups",
        auditor_group="signoff-auditors",
        agent_group="signoff-agents",
        algorithms=("RS256", "PS256", "EdDSA"),
        leeway_seconds=10.0,
    )
    assert settings.oidc.jwks_url == "https://idp.example.test/realms/signoff/certs"
    assert settings.oidc.jwks_file is None


def test_the_oidc_settings_default_and_a_file_path_is_made_absolute(tmp_path: Path) -> None:
    assert Settings.from_env({}).oidc is None
    assert Settings.from_env({"SIGNOFF_OIDC_ISSUER": "  "}).oidc is None
    oidc = OidcSettings.from_env(
        {
            "SIGNOFF_OIDC_ISSUER": ISSUER,
            "SIGNOFF_OIDC_AUDIENCE": AUDIENCE,
            "SIGNOFF_OIDC_JWKS": str(tmp_path / "jwks.json"),
        }
    )
    assert oidc is not None
    assert (oidc.reviewer_claim, oidc.groups_claim) == ("sub", None)
    assert (oidc.auditor_group, oidc.agent_group) == (None, None)
    assert (oidc.algorithms, oidc.leeway_seconds) == (("RS256", "ES256", "EdDSA"), 30.0)
    assert oidc.jwks_file == tmp_path / "jwks.json" and oidc.jwks_url is None
    relative = OidcSettings(ISSUER, (AUDIENCE,), "keys/jwks.json")
    assert relative.jwks_file is not None and relative.jwks_file.is_absolute()
    loopback = OidcSettings(ISSUER, (AUDIENCE,), "http://localhost:8080/certs")
    assert loopback.jwks_url == "http://localhost:8080/certs"


BASE = {
    "SIGNOFF_OIDC_ISSUER": ISSUER,
    "SIGNOFF_OIDC_AUDIENCE": AUDIENCE,
    "SIGNOFF_OIDC_JWKS": "https://idp.example.test/certs",
}


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("SIGNOFF_OIDC_ISSUER", "https://idp.example.test/ realm"),
        ("SIGNOFF_OIDC_ISSUER", "https://idp.example.test/\u200b"),
        ("SIGNOFF_OIDC_AUDIENCE", "signoff,"),
        ("SIGNOFF_OIDC_AUDIENCE", "sign off"),
        ("SIGNOFF_OIDC_JWKS", "ftp://idp.example.test/certs"),
        ("SIGNOFF_OIDC_JWKS", "file:///etc/jwks.json"),
        ("SIGNOFF_OIDC_JWKS", "http://idp.example.test/certs"),
        ("SIGNOFF_OIDC_JWKS", "https://user:secret@idp.example.test/certs"),
        ("SIGNOFF_OIDC_JWKS", "https:///certs"),
        ("SIGNOFF_OIDC_JWKS", "https://idp.example.test:port/certs"),
        ("SIGNOFF_OIDC_REVIEWER_CLAIM", "e mail"),
        ("SIGNOFF_OIDC_GROUPS_CLAIM", "gro\tups"),
        ("SIGNOFF_OIDC_AUDITOR_GROUP", "signoff auditors"),
        ("SIGNOFF_OIDC_AGENT_GROUP", "signoff agents"),
        ("SIGNOFF_OIDC_ALGORITHMS", "HS256"),
        ("SIGNOFF_OIDC_ALGORITHMS", "RS256,none"),
        ("SIGNOFF_OIDC_ALGORITHMS", "RS256,,ES256"),
        ("SIGNOFF_OIDC_LEEWAY_SECONDS", "soon"),
        ("SIGNOFF_OIDC_LEEWAY_SECONDS", "-1"),
        ("SIGNOFF_OIDC_LEEWAY_SECONDS", "3600"),
        ("SIGNOFF_OIDC_LEEWAY_SECONDS", "nan"),
    ],
)
def test_a_malformed_oidc_value_is_a_configuration_error_that_names_its_variable(
    variable: str, value: str
) -> None:
    environ = {**BASE, "SIGNOFF_OIDC_GROUPS_CLAIM": "groups", variable: value}
    with pytest.raises(ConfigurationError) as caught:
        Settings.from_env(environ)
    assert variable in str(caught.value)


@pytest.mark.parametrize("missing", list(BASE))
def test_an_issuer_audience_or_jwks_alone_is_a_configuration_error(missing: str) -> None:
    environ = {k: v for k, v in BASE.items() if k != missing}
    with pytest.raises(ConfigurationError) as caught:
        Settings.from_env(environ)
    assert missing in str(caught.value)


def test_a_claim_variable_without_the_rest_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="SIGNOFF_OIDC_ISSUER"):
        Settings.from_env({"SIGNOFF_OIDC_REVIEWER_CLAIM": "email"})


@pytest.mark.parametrize("variable", ["SIGNOFF_OIDC_AUDITOR_GROUP", "SIGNOFF_OIDC_AGENT_GROUP"])
def test_the_auditor_or_agent_group_needs_the_groups_claim(variable: str) -> None:
    with pytest.raises(ConfigurationError, match="SIGNOFF_OIDC_GROUPS_CLAIM") as caught:
        Settings.from_env({**BASE, variable: "auditors"})
    assert variable in str(caught.value)
