"""`/v1/ledger`: signed digests of the journal, the proofs behind them and its export (auditors).

The documents are those of `ledger.audit.verifier`, which checks them offline with only the
public keys (`signoff keys export-public`): a digest as `signoff ledger digest` writes it (with
its C2SP checkpoint when the log has an origin; `/checkpoint` returns just that note), the
proofs as `ledger prove` and `ledger consistency` do, exported events as `ledger export` does.
A proof is of a digest the caller holds, so the digest goes in the request body (a proof asks
nothing of the digest but its tree; the verifier checks its signature).

With a hot standby configured, proofs and the export read it (`standby`); a digest or a
checkpoint is taken on the primary: it integrates the stored tree and signs.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field

from approvals import Identity
from ledger.audit.digest import (
    Digest,
    prove_consistency,
    prove_inclusion,
    take_digest,
)
from ledger.audit.export import export_events
from ledger.audit.verifier import MalformedDocument
from ledger.errors import InvalidEvent
from ledger.limits import INT8
from ledger.log import get_logger

from .approvals_api import Caller, service_of
from .errors import ApiError
from .standby import reading_database

__all__ = ["MAX_EXPORT", "router"]

log = get_logger(__name__)

router = APIRouter(prefix="/v1/ledger", tags=["ledger"])

MAX_EXPORT = 1000
"""Most events one export page holds."""

Position = Annotated[int, Field(ge=1, le=INT8[1])]


def _auditor(identity: Identity) -> None:
    if identity.may_decide:
        raise ApiError(403, "forbidden", "the journal's digests and export need an auditor's token")


def _digest(document: dict[str, Any], name: str) -> Digest:
    try:
        digest = Digest.from_dict(document)
    except MalformedDocument as e:
        raise ApiError(422, "invalid", f"{name}: {e}") from e
    # The verifier takes any size; the journal's queries take a bigint.
    for field, value in (("tree_size", digest.tree_size), ("last_position", digest.last_position)):
        if value > INT8[1]:
            raise ApiError(422, "invalid", f"{name}: `{field}` is larger than any journal's")
    return digest


@router.get("/digest", summary="A fresh signed digest of the journal (`signoff_digest: 1`)")
async def digest(request: Request, identity: Caller) -> dict[str, Any]:
    _auditor(identity)
    service = service_of(request)
    async with service.journal_scans:
        taken = await take_digest(service.db, service.ring)
    return taken.to_dict()


@router.get(
    "/checkpoint",
    summary="A fresh C2SP checkpoint of the journal (signed note, text/plain)",
    response_class=PlainTextResponse,
)
async def checkpoint(request: Request, identity: Caller) -> PlainTextResponse:
    _auditor(identity)
    service = service_of(request)
    if service.db.settings.log_origin is None:
        raise ApiError(
            503, "unavailable", "the log has no origin (SIGNOFF_LOG_ORIGIN): no checkpoints"
        )
    async with service.journal_scans:
        taken = await take_digest(service.db, service.ring)
    assert taken.checkpoint is not None  # the origin is set
    return PlainTextResponse(taken.checkpoint, media_type="text/plain; charset=utf-8")


class InclusionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    position: Position = Field(description="the event's journal position")
    digest: dict[str, Any] = Field(description="the digest (`GET /v1/ledger/digest`)")


@router.post(
    "/proofs/inclusion",
    summary="Proof that one event is in a digest (`signoff_inclusion_proof: 1`)",
)
async def inclusion(
    request: Request, response: Response, body: InclusionRequest, identity: Caller
) -> dict[str, Any]:
    _auditor(identity)
    of = _digest(body.digest, "digest")
    service = service_of(request)
    async with service.journal_scans:
        db = await reading_database(request, response, identity)
        proof = await prove_inclusion(db, body.position, of)
    return proof.to_dict()


class ConsistencyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    old: dict[str, Any] = Field(description="the earlier digest")
    new: dict[str, Any] = Field(description="the later digest")


@router.post(
    "/proofs/consistency",
    summary="Proof that the new digest's journal extends the old one's "
    "(`signoff_consistency_proof: 1`)",
)
async def consistency(
    request: Request, response: Response, body: ConsistencyRequest, identity: Caller
) -> dict[str, Any]:
    _auditor(identity)
    old, new = _digest(body.old, "old"), _digest(body.new, "new")
    service = service_of(request)
    async with service.journal_scans:
        db = await reading_database(request, response, identity)
        proof = await prove_consistency(db, old, new)
    return proof.to_dict()


@router.get("/export", summary="Journal events in the global order, as `ledger export` writes")
async def export(
    request: Request,
    response: Response,
    identity: Caller,
    after: Annotated[
        int, Query(ge=0, le=INT8[1], description="after the event at this position (0: start)")
    ] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_EXPORT)] = 100,
) -> dict[str, Any]:
    _auditor(identity)
    events: list[dict[str, Any]] = []
    db = await reading_database(request, response, identity)
    try:
        # One batch of `limit`; the export holds no connection between its events.
        async for event in export_events(db, after=after, batch_size=limit):
            events.append(event.to_dict())
            if len(events) == limit:
                break
    except InvalidEvent as e:
        raise ApiError(422, "invalid", f"after: {e}") from e
    full = len(events) == limit
    return {"events": events, "next_after": events[-1]["position"] if full else None}
