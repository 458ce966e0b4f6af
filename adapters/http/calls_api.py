"""`/v1/calls`: the tool-call ledger for auditors, and the `outcome_unknown` queue for reviewers.

An auditor queries calls, reads one call's story (its record and events, never its arguments;
a reviewer too, of a call whose approval's policy admits it: what became of what it decided)
and reveals a call's arguments and result in clear: each reveal is recorded in the journal
(`reveal:<run>/<call>`) under the authenticated identity, signed by the service, before
anything is shown; with a
client's request id (`Idempotency-Key`, or `request_id` in the body), a retry records nothing
new. A reviewer lists the calls whose outcome is unknown and resolves them as the token's
reviewer, signed by the service (`ToolLedger.resolve`); it reads nothing else here, and an
auditor resolves none. An auditor's listing and stories read the hot standby when one is
configured (`standby`); a reveal is recorded, so it is the primary's.

Run and call ids may hold '/', so they travel as query parameters or body fields, never in the
path. A call is shown as `signoff ledger calls --json` shows it; a story as `ledger show --json`.
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from approvals import Identity, UnknownApproval
from ledger.audit.queries import (
    CallFilter,
    CallKey,
    call_story,
    call_summary,
    find_calls,
    story_summary,
)
from ledger.calls.model import CallRecord, CallStatus
from ledger.errors import CallStateError
from ledger.limits import name_problem
from ledger.log import get_logger

from .approvals_api import (
    MAX_PAGE,
    MAX_REQUEST_ID,
    Caller,
    IdempotencyKey,
    may_see,
    optional_request_id,
    service_of,
)
from .errors import ApiError
from .service import Service
from .standby import reading_database

__all__ = ["router"]

log = get_logger(__name__)

router = APIRouter(prefix="/v1/calls", tags=["calls"])

_ID = 200  # the longest run or call id the ledger takes
Id = Annotated[str, Query(min_length=1, max_length=_ID)]


def _auditor(identity: Identity, what: str) -> None:
    if identity.may_decide:
        raise ApiError(403, "forbidden", f"{what} needs an auditor's token")


def _cursor_text(call: CallRecord) -> str:
    raw = json.dumps([call.started_at.isoformat(), call.run_id, call.call_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _cursor_of(text: str | None) -> CallKey | None:
    if text is None:
        return None
    try:
        at, run_id, call_id = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        when = datetime.fromisoformat(at)
        if name_problem(run_id) or name_problem(call_id) or when.tzinfo is None:
            raise ValueError("not a cursor")
        when = when.astimezone(UTC)  # a time whose UTC is past datetime's range overflows
    except (ValueError, TypeError, OverflowError, binascii.Error) as e:
        raise ApiError(422, "invalid", "cursor is not one this API gave") from e
    return when, run_id, call_id


def _utc(name: str, moment: datetime | None) -> datetime | None:
    """A time from a query, in UTC; without a zone it is UTC (as `signoff ledger calls` reads
    it). 422 when its UTC is outside datetime's range (year 1 at +14:00)."""
    if moment is None:
        return None
    try:
        return (moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)).astimezone(UTC)
    except OverflowError as e:
        raise ApiError(422, "invalid", f"{name} is out of range") from e


def _names(**values: str | None) -> None:
    """Refuse ids and names the ledger never holds (blank, NUL, lone surrogates) before any
    query: 422 naming the field and what is wrong."""
    for field, value in values.items():
        if value is not None and (problem := name_problem(value, _ID)) is not None:
            raise ApiError(422, "invalid", f"{field} {problem}")


@router.get("", summary="Tool calls, oldest first (a reviewer: only status=outcome_unknown)")
async def calls(
    request: Request,
    response: Response,
    identity: Caller,
    run_id: Annotated[str | None, Query(max_length=_ID)] = None,
    tool: Annotated[str | None, Query(max_length=_ID)] = None,
    status: CallStatus | None = None,
    since: Annotated[datetime | None, Query(description="started at or after")] = None,
    until: Annotated[datetime | None, Query(description="started before")] = None,
    approved_by: Annotated[str | None, Query(max_length=_ID)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    cursor: Annotated[str | None, Query(max_length=1000)] = None,
) -> dict[str, Any]:
    if identity.may_decide and status is not CallStatus.OUTCOME_UNKNOWN:
        raise ApiError(
            403,
            "forbidden",
            "a reviewer's token lists only the calls it may resolve: status=outcome_unknown",
        )
    _names(run_id=run_id, tool=tool, approved_by=approved_by)
    where = CallFilter(
        run_id=run_id,
        tool=tool,
        status=status,
        since=_utc("since", since),
        until=_utc("until", until),
        approved_by=approved_by,
        limit=limit + 1,  # one more says whether another page follows
        after=_cursor_of(cursor),
    )
    service = service_of(request)
    db = await reading_database(request, response, identity)  # a reviewer's: the primary
    found = [call for call, _ in await find_calls(db, where)]
    page = found[:limit]
    more = len(found) > limit
    # A reviewer's page leaves out the calls it may not resolve: it may be short while a
    # cursor still says there is more.
    shown = [c for c in page if await _may_resolve(service, identity, c)]
    return {
        "calls": [call_summary(c) for c in shown],
        "next_cursor": _cursor_text(page[-1]) if more else None,
    }


async def _may_resolve(service: Service, identity: Identity, call: CallRecord) -> bool:
    """Whether `identity` may see and settle `call`: an auditor sees every call (and settles
    none); a reviewer a call that no approval allowed, or one whose approval's policy admits
    it, as the reviewers who could have decided it are the ones who know whether it ran."""
    if not identity.may_decide or call.approval_id is None:
        return True
    try:
        approval = await service.store.get(call.approval_id)
    except UnknownApproval:
        return False
    return may_see(identity, approval)


@router.get(
    "/story",
    summary="One call's record and events (auditors; reviewers its approval admits; no arguments)",
)
async def story(
    request: Request, response: Response, identity: Caller, run_id: Id, call_id: Id
) -> dict[str, Any]:
    _names(run_id=run_id, call_id=call_id)
    service = service_of(request)
    found = await call_story(await reading_database(request, response, identity), run_id, call_id)
    if identity.may_decide and not await _approval_admits(service, identity, found.call):
        raise ApiError(
            403, "forbidden", "a reviewer reads the story of a call its approval's policy admits"
        )
    return story_summary(found)


async def _approval_admits(service: Service, identity: Identity, call: CallRecord) -> bool:
    """Whether the approval that allowed `call` admits `identity` (no approval: no)."""
    return call.approval_id is not None and await _may_resolve(service, identity, call)


class CallRef(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_id: str = Field(min_length=1, max_length=_ID)
    call_id: str = Field(min_length=1, max_length=_ID)


class RevealRequest(CallRef):
    request_id: str | None = Field(default=None, min_length=1, max_length=MAX_REQUEST_ID)


@router.post(
    "/reveal",
    summary="A call's arguments and result in clear, recorded in the journal (auditors)",
)
async def reveal(
    request: Request,
    response: Response,
    body: RevealRequest,
    identity: Caller,
    idempotency_key: IdempotencyKey = None,
) -> dict[str, Any]:
    _auditor(identity, "revealing a call")
    _names(run_id=body.run_id, call_id=body.call_id)
    request_id = optional_request_id(idempotency_key, body.request_id)
    service = service_of(request)
    found = await call_story(
        service.db,
        body.run_id,
        body.call_id,
        reveal_by=identity.reviewer,
        ring=service.ring,
        request_id=request_id,
    )
    if found.replayed:  # a retry: its reveal is in the journal already
        response.headers["Idempotent-Replayed"] = "true"
    log.info(
        "call reveal replayed" if found.replayed else "call revealed",
        run_id=body.run_id,
        call_id=body.call_id,
        by=identity.reviewer,
        request_id=request_id,
    )
    return story_summary(found, revealed=True)


class Resolution(CallRef):
    status: Literal["succeeded", "failed"] = Field(
        description="what checking the target system showed: it took effect, or it did not"
    )
    note: str | None = Field(default=None, max_length=2000, description="what was checked")
    request_id: str | None = Field(default=None, min_length=1, max_length=MAX_REQUEST_ID)


@router.post(
    "/resolve",
    summary="Settle an outcome_unknown call as the authenticated reviewer (signed; repeatable)",
)
async def resolve(
    request: Request,
    response: Response,
    body: Resolution,
    identity: Caller,
    idempotency_key: IdempotencyKey = None,
) -> dict[str, Any]:
    if not identity.may_decide:
        raise ApiError(403, "forbidden", "an auditor's token reads and never resolves")
    request_id = optional_request_id(idempotency_key, body.request_id)
    service = service_of(request)
    run_id, call_id, verdict = body.run_id, body.call_id, CallStatus(body.status)
    bound = log.bind(
        run_id=run_id, call_id=call_id, reviewer=identity.reviewer, request_id=request_id
    )

    async def replayed() -> dict[str, Any] | None:
        """The answer to this request if it was recorded before (a retry), else None; as a
        decision's: the request id is in the `call.resolved` event."""
        if request_id is None:
            return None
        earlier = await service.ledger.resolution_of_request(
            run_id, call_id, identity.reviewer, request_id
        )
        if earlier is None:
            return None
        if earlier is not verdict:  # the key names a request whose answer is recorded
            raise ApiError(409, "conflict", f"request id {request_id!r} resolved as {earlier}")
        response.headers["Idempotent-Replayed"] = "true"
        bound.info("resolution replayed", status=str(verdict))
        return call_summary(await service.ledger.get(run_id, call_id))

    if (answer := await replayed()) is not None:
        return answer
    try:
        if not await _may_resolve(service, identity, await service.ledger.get(run_id, call_id)):
            raise ApiError(
                403, "forbidden", "the policy of the approval that allowed this call admits you not"
            )
        record = await service.ledger.resolve(
            run_id,
            call_id,
            succeeded=verdict is CallStatus.SUCCEEDED,
            by=identity.reviewer,
            note=body.note,
            request_id=request_id,
        )
    except CallStateError as e:  # the answer depends on who settled it, and how
        if (answer := await replayed()) is not None:  # the same request, racing itself
            return answer
        current = await service.ledger.get(run_id, call_id)
        # A client that sends no request id: the same verdict by the same reviewer is taken
        # for its retry.
        same = current.resolved_by == identity.reviewer and current.status is verdict
        if request_id is None and same:
            response.headers["Idempotent-Replayed"] = "true"
            bound.info("resolution replayed", status=str(verdict))
            return call_summary(current)
        bound.info("resolution refused", status=str(current.status))
        raise ApiError(409, "conflict", _conflict(current)) from e
    bound.info("call resolved", status=str(record.status))
    return call_summary(record)


def _conflict(call: CallRecord) -> str:
    if call.resolved_by is not None:
        return f"the call was resolved as {call.status} by {call.resolved_by}"
    return f"the call is {call.status}, not outcome_unknown"
