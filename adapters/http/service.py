"""What one `signoff serve` process holds: its database, the reviewer side's approval store and
tool ledger (it resolves `outcome_unknown` calls), its authenticators, its feed of approval
changes (one LISTEN connection for all its streams), its metrics, its readiness (`readiness`:
the health checks `/readyz` answers from) and its limit on refused credentials. Nothing here
is state another replica needs: every answer comes from the database (each replica measures
and limits on its own).

`open_service` checks, before the service accepts a request, that it can do its job: a login
that has `signoff_reviewer` (it decides through that role's functions) and the reviewer side's
KEK (it signs decisions). What is missing is named in one line. With `settings.webhook`, the
service also posts webhook notifications (`webhooks.Webhooks`), and with `settings.slack` and
`settings.email` it tells reviewers of new requests in Slack (`slack.SlackNotifier`) and by
e-mail (`mail.EmailNotifier`), from when it is opened until it is closed. With
`settings.read_database_url`, auditors' reads go to that hot standby (`standby`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from approvals import ApiTokens, ApprovalStore
from ledger.audit.tree import integrate
from ledger.calls.service import ToolLedger
from ledger.errors import ConfigurationError
from ledger.health import Health
from ledger.keys import KeyRing
from ledger.log import get_logger
from ledger.store import Database
from ledger.store.settings import Settings
from ledger.store.standby import open_standby

from . import _sql as sql
from .auth import ApiTokenAuthenticator, Authentication, Authenticator, OidcAuthenticator
from .csrf import CsrfKey
from .deliveries import Deliveries
from .horizon import HorizonWatch
from .limits import DEFAULT_FAILURE_LIMIT, FailureLimit, FailureLimiter
from .live import ApprovalFeed
from .mail import EmailNotifier
from .metrics import Metrics
from .oidc import JwksUnavailable, OidcVerifier
from .readiness import Readiness
from .slack import SlackNotifier
from .standby import StandbyWatch
from .webhooks import Webhooks

log = get_logger(__name__)

__all__ = [
    "KEEPALIVE_SECONDS",
    "MAX_BODY_BYTES",
    "STREAM_SECONDS",
    "Service",
    "ServiceMisconfigured",
    "open_service",
]

MAX_BODY_BYTES = 64 * 1024
"""Largest request body the service reads (a decision with edited arguments fits well)."""

KEEPALIVE_SECONDS = 15.0
"""An event stream idle this long gets a comment, so that proxies keep it open."""
STREAM_SECONDS = 300.0
"""An event stream ends after this long; the client reconnects (`Last-Event-ID`) and is
authenticated again, so a revoked or expired token stops streaming within this time."""

_ROLE = "signoff_reviewer"


class ServiceMisconfigured(ConfigurationError):
    """The service cannot do its job with this configuration (the message says what to set)."""


@dataclass
class Service:
    """A running service's parts; `close()` at the end."""

    db: Database
    store: ApprovalStore
    authentication: Authentication
    feed: ApprovalFeed
    ledger: ToolLedger
    metrics: Metrics
    horizon: HorizonWatch  # sampled while the service is served (`server`)
    readiness: Readiness
    max_body_bytes: int = MAX_BODY_BYTES
    oidc: OidcVerifier | None = None
    keepalive_seconds: float = KEEPALIVE_SECONDS
    stream_seconds: float = STREAM_SECONDS
    webhooks: Webhooks | None = None
    notifiers: list[Deliveries] = field(default_factory=list)
    # Digests, proofs and the tree's integration: one at a time per process, so that auditors
    # cannot take every database connection and the event loop from reviewers (a digest reads
    # the events since the last integration, which after a long pause may be many).
    journal_scans: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(1))
    integrator: asyncio.Task[None] | None = None
    # Set when the server begins to stop: event streams never end by themselves, so each ends
    # itself on this (the client reconnects elsewhere) instead of being cut mid-response.
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    # The hot standby auditors read from (`standby`), and the approvals as it holds them.
    standby: StandbyWatch | None = None
    standby_store: ApprovalStore | None = None

    @property
    def failure_limit(self) -> FailureLimit:
        """Refused credentials one client address may present before it gets 429."""
        return self.authentication.limiter.limit

    async def health(self) -> Health:
        """The health checks as `/readyz` answers them (`readiness`)."""
        return await self.readiness.health()

    @property
    def ring(self) -> KeyRing:
        """The reviewer side's key ring (it signs decisions, resolutions and digests)."""
        return self.store.ring

    async def close(self) -> None:
        if self.integrator is not None:
            self.integrator.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.integrator
        if self.webhooks is not None:
            await self.webhooks.close()
        for notifier in self.notifiers:
            await notifier.close()
        await self.feed.close()
        await self.ledger.close()
        await self.store.close()
        if self.standby_store is not None:
            await self.standby_store.close()
        if self.standby is not None:
            await self.standby.reads.close()
        await self.db.close()


AuthenticatorsOf = Callable[[Database], Sequence[Authenticator]]


def api_tokens(db: Database) -> Sequence[Authenticator]:
    """The default authenticators: API tokens of this database."""
    return [ApiTokenAuthenticator(ApiTokens(db))]


async def open_service(
    settings: Settings,
    *,
    authenticators: AuthenticatorsOf = api_tokens,
    pool_size: int = 10,
    max_body_bytes: int = MAX_BODY_BYTES,
    failure_limit: FailureLimit = DEFAULT_FAILURE_LIMIT,
) -> Service:
    """Connect, check the login's role and the reviewer KEK, load the key ring.

    Args:
        authenticators: makes the service's authenticators from its database (API tokens by
            default). With `settings.oidc`, an OIDC authenticator joins them; a JWKS URL is
            read once here, and when that fails the service starts anyway (its keys are read
            again on the first token, which is 503 until they can be).
        failure_limit: how many refused credentials a client address may present in a time
            (10 a minute by default), after which its credentials get 429 unchecked.

    With `settings.webhook`, the webhook task starts here, and so do the Slack and e-mail
    notifiers with `settings.slack` and `settings.email`; `Service.close` stops them.

    Raises:
        ServiceMisconfigured: no reviewer KEK, or a login without `signoff_reviewer`.
        ConfigurationError: a JWKS file that cannot be used.
        DatabaseUnavailable, SchemaOutOfDate, KekMissing, ...: as `Database.from_settings`
            and `KeyRing.open`.
    """
    verifier = None if settings.oidc is None else OidcVerifier(settings.oidc)
    if settings.reviewer_kek is None:
        raise ServiceMisconfigured(
            "signoff serve signs decisions: set SIGNOFF_REVIEWER_KEK or "
            "SIGNOFF_REVIEWER_KEK_FILE (the reviewer side's KEK)"
        )
    db = await Database.from_settings(settings, pool_size=pool_size)
    try:
        async with db.connection() as conn:
            if not await conn.fetchval(sql.HAS_ROLE, _ROLE):
                login = await conn.fetchval("SELECT session_user")
                raise ServiceMisconfigured(
                    f"signoff serve decides as reviewers: its login {login} needs the role "
                    f"{_ROLE} (GRANT {_ROLE} TO {login})"
                )
        ring = await KeyRing.open(db, create_missing=False)
        ring.require_decision_signer()
        found = list(authenticators(db))
        if verifier is not None:
            if verifier.keys_held == 0:
                with contextlib.suppress(JwksUnavailable):  # logged by the verifier
                    await verifier.refresh()
            found.append(OidcAuthenticator(verifier, db))
        store = ApprovalStore(db, ring)
        metrics = Metrics()
        horizon = HorizonWatch(db, metrics, settings.horizon_warn_seconds)
        webhooks = None if settings.webhook is None else Webhooks(db, store, settings.webhook)
        service = Service(
            db=db,
            store=store,
            authentication=Authentication(
                found, csrf=CsrfKey(ring), limiter=FailureLimiter(failure_limit), metrics=metrics
            ),
            feed=ApprovalFeed(db, on_delay=metrics.feed_delay.observe),
            ledger=ToolLedger(db, ring),
            metrics=metrics,
            horizon=horizon,
            readiness=Readiness(db, ring, horizon, settings),
            max_body_bytes=max_body_bytes,
            oidc=verifier,
            webhooks=webhooks,
            notifiers=_notifiers(settings, db, store),
        )
    except BaseException:
        await db.close()
        raise
    try:
        if settings.read_database_url is not None:
            reads = await open_standby(settings, pool_size=max(2, pool_size // 2))
            service.standby = StandbyWatch(reads, db, metrics.registry)
            service.standby_store = ApprovalStore(reads, ring)
            metrics.standby = service.standby
        for task in ([webhooks] if webhooks is not None else []) + service.notifiers:
            await task.start()
    except BaseException:
        await service.close()
        raise
    if settings.tree_integrate_seconds > 0:
        service.integrator = asyncio.create_task(
            _integrate_every(service, settings.tree_integrate_seconds)
        )
    return service


def _notifiers(settings: Settings, db: Database, store: ApprovalStore) -> list[Deliveries]:
    """The reviewers' notifiers the settings configure (Slack, e-mail)."""
    found: list[Deliveries] = []
    if settings.public_url is None:  # the settings refuse a notifier without it
        return found
    if settings.slack is not None:
        found.append(SlackNotifier(db, store, settings.slack, settings.public_url))
    if settings.email is not None:
        found.append(EmailNotifier(db, store, settings.email, settings.public_url))
    return found


async def _integrate_every(service: Service, seconds: float) -> None:
    """Keep the stored Merkle tree close to the journal, so that a digest has little to do; a
    failure is logged and the next round tries again."""
    while True:
        try:
            async with service.journal_scans:
                done = await integrate(service.db)
            if done.integrated:
                log.info("merkle tree integrated", events=done.integrated, size=done.tree_size)
        except Exception as e:  # the database away for a while: the next round retries
            log.warning("merkle tree integration failed", error_type=type(e).__name__)
        await asyncio.sleep(seconds)
