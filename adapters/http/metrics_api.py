"""`GET /metrics`: the service's metrics (`metrics.Metrics`) in the Prometheus text format, for
an auditor's token: a scraper sends it as `authorization: {credentials: ...}` (Prometheus'
scrape configuration). Metrics say how busy the service is and who fails to get in; nobody
reads them anonymously, and a reviewer's token does not. The gauges of the journal's horizon
(`horizon`), of the database's state (`gauges`) and of a standby's lag (`standby`) are sampled
before each answer."""

from __future__ import annotations

import contextlib

from fastapi import APIRouter, Request, Response

from approvals import Scope

from .approvals_api import Caller, service_of
from .errors import ApiError
from .metrics import CONTENT_TYPE

__all__ = ["router"]

router = APIRouter()


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request, identity: Caller) -> Response:
    if identity.scope is not Scope.AUDITOR:
        raise ApiError(403, "forbidden", "metrics are for an auditor's token")
    metrics = service_of(request).metrics
    for sampler in (metrics.horizon, metrics.database_sampler, metrics.standby):
        if sampler is not None:
            with contextlib.suppress(Exception):  # the gauges keep their last values
                await sampler.sample()
    exposition = metrics.exposition()
    return Response(exposition, media_type=CONTENT_TYPE, headers={"Cache-Control": "no-store"})
