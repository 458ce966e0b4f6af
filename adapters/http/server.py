"""Running the service on uvicorn: `serve` (what `signoff serve` runs) and `running` (a server in
this process on a free port, for tests and the demo).

The service refuses to start with nobody to let in: no active API token and no OIDC
configuration (nor another authenticator), unless in development mode. Development mode
(`dev_reviewer`) is for one person on one machine: only on a loopback address, it makes a random
token that lives in this process's memory alone (never stored), for the reviewer named, and says
so loudly.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import secrets
import socket
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import uvicorn

from approvals import Identity, InvalidCredential, Scope
from approvals.identity import reviewer_id
from approvals.reviewers import directory_groups
from ledger.store import Database, group_sizes
from ledger.store.config import is_loopback
from ledger.store.settings import Settings

from .app import create_app
from .auth import ApiTokenAuthenticator, Authenticator
from .connections import bounded_protocol
from .gauges import StateSampler
from .service import Service, ServiceMisconfigured, api_tokens, open_service

__all__ = [
    "DEV_PREFIX",
    "DevAuthenticator",
    "bound_port",
    "ended",
    "running",
    "serve",
    "until_started",
]

DEV_PREFIX = "sgfdev_"


class DevAuthenticator:
    """Development mode's one token, held in memory only, for one reviewer."""

    def __init__(self, db: Database, reviewer: str) -> None:
        self.db = db
        self.reviewer = reviewer_id(reviewer)
        self.token = DEV_PREFIX + secrets.token_urlsafe(32)

    def __repr__(self) -> str:  # never the token
        return f"DevAuthenticator(reviewer={self.reviewer!r})"

    def accepts(self, credential: str) -> bool:
        return credential.startswith(DEV_PREFIX)

    async def authenticate(self, credential: str) -> Identity:
        if not hmac.compare_digest(credential.encode(), self.token.encode()):
            raise InvalidCredential()
        async with self.db.connection() as conn:
            groups = await directory_groups(conn, self.reviewer)
        return Identity(
            self.reviewer, Scope.REVIEWER, groups or frozenset(), "dev", listed=groups is not None
        )


@dataclass(frozen=True)
class Started:
    """What a started service tells whoever started it."""

    url: str
    login: str
    active_tokens: int
    oidc_issuer: str | None = None
    dev_token: str | None = None
    dev_reviewer: str | None = None

    def __repr__(self) -> str:
        return f"Started(url={self.url!r}, login={self.login!r})"


async def _checked_service(
    settings: Settings,
    host: str,
    dev_reviewer: str | None,
    extra: Callable[[Database], Sequence[Authenticator]] | None,
) -> tuple[Service, DevAuthenticator | None, int]:
    if dev_reviewer is not None and not is_loopback(host):
        raise ServiceMisconfigured(
            f"--dev serves only on a loopback address (127.0.0.1, ::1), not {host}"
        )
    dev: DevAuthenticator | None = None

    def authenticators(db: Database) -> Sequence[Authenticator]:
        nonlocal dev
        found = [*api_tokens(db), *(extra(db) if extra else ())]
        if dev_reviewer is not None:
            dev = DevAuthenticator(db, dev_reviewer)
            found.append(dev)
        return found

    service = await open_service(settings, authenticators=authenticators)
    try:
        tokens = next(
            a for a in service.authentication.authenticators if isinstance(a, ApiTokenAuthenticator)
        )
        active = await tokens.tokens.active_count()
        if active == 0 and extra is None and dev is None and service.oidc is None:
            raise ServiceMisconfigured(
                "signoff serve has nobody to let in: make an API token as the owner "
                "(signoff tokens create --reviewer ID), configure OIDC (SIGNOFF_OIDC_ISSUER, "
                "_AUDIENCE, _JWKS), or run with --dev on loopback"
            )
    except BaseException:
        await service.close()
        raise
    return service, dev, active


class _Server(uvicorn.Server):
    """uvicorn's server, which tells the service it stops before it waits for the requests in
    flight: event streams end themselves then (`Service.stopping`), so none is cancelled."""

    def __init__(self, config: uvicorn.Config, service: Service) -> None:
        super().__init__(config)
        self.service = service

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self.service.stopping.clear()  # served again after a stop: its streams run again
        await super().startup(sockets)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.service.stopping.set()
        await super().shutdown(sockets)


def _server(service: Service, host: str, port: int) -> uvicorn.Server:
    settings = service.db.settings
    config = uvicorn.Config(
        create_app(service),
        host=host,
        port=port,
        # A client may not hold a connection by trickling its request head or saying nothing.
        http=bounded_protocol(settings.http_header_seconds, settings.http_idle_seconds),
        timeout_keep_alive=max(1, round(settings.http_idle_seconds)),
        log_config=None,  # the command configures logging; uvicorn must not
        access_log=False,  # the app logs each request, without headers
        lifespan="off",
        server_header=False,
        proxy_headers=False,
        # Streams end themselves when the server stops (`_Server`); this bounds the rest.
        timeout_graceful_shutdown=5,
    )
    return _Server(config, service)


def bound_port(server: uvicorn.Server) -> int:
    port: int = server.servers[0].sockets[0].getsockname()[1]
    return port


async def _login(service: Service) -> str:
    async with service.db.connection() as conn:
        login: str = await conn.fetchval("SELECT session_user")
    return login


@asynccontextmanager
async def _measuring(service: Service) -> AsyncIterator[None]:
    """While the service is served: sample the journal's horizon (`horizon`), read the
    database's state on scrapes (`gauges`), and measure this process's group commits."""
    metrics = service.metrics
    watch = service.horizon
    metrics.horizon = watch
    deliveries = [*([service.webhooks] if service.webhooks is not None else []), *service.notifiers]
    metrics.database_sampler = StateSampler(service.db, metrics.database, deliveries)
    unlisten = group_sizes.listen(metrics.group_commit_steps.observe)
    task = asyncio.create_task(watch.run())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        unlisten()
        metrics.horizon = metrics.database_sampler = None


@asynccontextmanager
async def running(
    service: Service, host: str = "127.0.0.1", port: int = 0
) -> AsyncIterator[tuple[uvicorn.Server, int]]:
    """Serve `service` in this process until the block ends; yields the server and its port
    (port 0: a free one)."""
    server = _server(service, host, port)
    task = asyncio.create_task(server.serve())
    try:
        await until_started(server, task, host, port)
        async with _measuring(service):
            yield server, bound_port(server)
    finally:
        server.should_exit = True
        await ended(task, host, port)


async def serve(
    settings: Settings,
    *,
    host: str = "127.0.0.1",
    port: int = 8600,
    dev_reviewer: str | None = None,
    authenticators: Callable[[Database], Sequence[Authenticator]] | None = None,
    on_started: Callable[[Started], None] | None = None,
) -> None:
    """Run the service until it is stopped (SIGINT, SIGTERM).

    Args:
        dev_reviewer: development mode, for this reviewer (loopback only).
        authenticators: more authenticators beside API tokens (and OIDC, from
            `settings.oidc`).
        on_started: told where it listens, once it does.

    Raises:
        ServiceMisconfigured: nobody to let in, `--dev` off loopback, no reviewer KEK, a login
            without `signoff_reviewer`.
    """
    service, dev, active = await _checked_service(settings, host, dev_reviewer, authenticators)
    try:
        server = _server(service, host, port)
        task = asyncio.create_task(server.serve())
        await until_started(server, task, host, port)
        if on_started is not None:
            shown = f"[{host}]" if ":" in host else host
            on_started(
                Started(
                    url=f"http://{shown}:{bound_port(server)}",
                    login=await _login(service),
                    active_tokens=active,
                    oidc_issuer=None if service.oidc is None else service.oidc.settings.issuer,
                    dev_token=None if dev is None else dev.token,
                    dev_reviewer=None if dev is None else dev.reviewer,
                )
            )
        async with _measuring(service):
            await ended(task, host, port)
    finally:
        await service.close()


async def until_started(
    server: uvicorn.Server, task: asyncio.Task[None], host: str, port: int
) -> None:
    """Wait until uvicorn listens (it has no event to wait on); its failure to bind is ours."""
    while not server.started:
        if task.done():
            await ended(task, host, port)
            raise _cannot_listen(host, port)
        await asyncio.sleep(0.01)


def _cannot_listen(host: str, port: int) -> ServiceMisconfigured:
    return ServiceMisconfigured(f"cannot listen on {host}:{port} (in use, or not allowed)")


async def ended(task: asyncio.Task[None], host: str, port: int) -> None:
    """Wait for uvicorn's task; it exits the process when it cannot bind: say so instead."""
    try:
        await task
    except SystemExit:
        raise _cannot_listen(host, port) from None
