"""Running the gateway: the database (a worker login is all it needs), the key ring, the
upstreams, then stdio or Streamable HTTP until the client leaves or the process is stopped."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

from approvals import ApprovalStore
from approvals.policies import PolicyPoint, PolicySets
from ledger.calls.service import DEFAULT_LEASE_SECONDS, ToolLedger
from ledger.errors import SignoffError
from ledger.keys import KeyRing
from ledger.log import get_logger
from ledger.store import Database
from ledger.store.settings import Settings

from .calls import Gateway
from .config import GatewayConfig
from .server import build_server, serve_http, serve_stdio
from .upstreams import connect_upstreams

__all__ = ["Listen", "run_gateway"]

log = get_logger(__name__)


@dataclass(frozen=True)
class Listen:
    """Serve Streamable HTTP here instead of stdio."""

    host: str
    port: int


async def run_gateway(
    settings: Settings,
    config: GatewayConfig,
    *,
    principal: str | None,
    listen: Listen | None = None,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
    on_started: Callable[[str], None] | None = None,
) -> None:
    """Serve until the stdio client leaves or the HTTP server is stopped.

    Args:
        principal: who calls over stdio (required there); HTTP takes it from bearer tokens.
        on_started: told where the HTTP server listens, once it does.

    Raises:
        GatewayConfigError: an upstream cannot be reached, or a config that does not fit it.
        ConfigurationError, DatabaseUnavailable: the database or its KEK.
    """
    try:
        await _run(settings, config, principal, listen, lease_seconds, on_started)
    except BaseExceptionGroup as group:  # the SDK's task groups wrap what ends them
        raise _alone(group) or group from None


def _alone(group: BaseExceptionGroup[BaseException]) -> SignoffError | None:
    """The one Signoff error `group` holds (however deep), if that is all it holds."""
    leaves: list[BaseException] = []
    pending: list[BaseException] = [group]
    while pending:
        e = pending.pop()
        if isinstance(e, BaseExceptionGroup):
            pending.extend(e.exceptions)
        else:
            leaves.append(e)
    only = leaves[0] if len(leaves) == 1 else None
    return only if isinstance(only, SignoffError) else None


async def _run(
    settings: Settings,
    config: GatewayConfig,
    principal: str | None,
    listen: Listen | None,
    lease_seconds: float,
    on_started: Callable[[str], None] | None,
) -> None:
    async with await Database.from_settings(settings) as db:
        ring = await KeyRing.open(db)
        store = ApprovalStore(db, ring)
        ledger = ToolLedger(db, ring, lease_seconds=lease_seconds)
        point = PolicyPoint(PolicySets(db, ring))
        try:
            async with connect_upstreams(config) as upstreams:
                gateway = Gateway(
                    config,
                    upstreams,
                    store,
                    ledger,
                    ring,
                    principal=principal if listen is None else None,
                    conversation=uuid.uuid4().hex if listen is None else "default",
                    policy=point,
                )
                await gateway.register_tools()
                server = build_server(gateway)
                if listen is None:
                    log.info("gateway serving stdio", principal=principal)
                    await serve_stdio(server)
                    return
                from .auth import agent_verifier  # the HTTP service's verifiers

                await serve_http(
                    server,
                    host=listen.host,
                    port=listen.port,
                    verifier=agent_verifier(settings, db),
                    issuer_url=config.public_url,
                    on_started=on_started,
                )
        finally:
            await point.close()
            await ledger.close()
            await store.close()
