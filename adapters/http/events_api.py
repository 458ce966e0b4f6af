"""`GET /v1/approvals/events`: new and changed approvals as Server-Sent Events.

A stream carries every change of every approval the caller may see: for a reviewer, those whose
policy admits it (approvers, the directory's groups), whatever their status, so the decision
of an approval it was shown arrives too; for an auditor, every approval (read only, like the
rest of the API). Each event is a change (`live.ApprovalChange`) with the approval as it is
when it is sent (`shapes.approval_document`, no arguments); its id is the journal position,
so a client that reconnects with `Last-Event-ID` (or starts with `?since=`) misses nothing,
whichever replica it reaches. Only what the service reads from the journal after the
stream's cursor is sent: a notification (which any database login may send) never makes an
event by itself.

An idle stream gets a keepalive comment every `Service.keepalive_seconds`; a stream ends after
`Service.stream_seconds`, and the client's reconnect is authenticated again (a revoked or
expired token streams no longer than that). A stream also ends, whole, as soon as the server
begins to stop (`Service.stopping`), so that stopping waits for no stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse

from approvals import Identity, InvalidApprovalRequest, UnknownApproval
from ledger.errors import DatabaseUnavailable, InvalidEvent
from ledger.log import get_logger

from .approvals_api import Caller, may_see, service_of
from .errors import ApiError
from .live import KEEPALIVE, ApprovalChange, sse_format
from .service import Service
from .shapes import approval_document

__all__ = ["router"]

log = get_logger(__name__)

router = APIRouter(prefix="/v1/approvals", tags=["approvals"])

_RETRY = b"retry: 1000\n\n"  # reconnect after 1 s, not the browser's default of 3 to 5
_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}  # nginx: do not buffer


def _since(last_event_id: str | None, since: int | None) -> int | None:
    """Where to resume: `Last-Event-ID` (a reconnect) over `?since=` (a first connect)."""
    if last_event_id is None or not last_event_id.strip():
        return since
    text = last_event_id.strip()
    if not text.isascii() or not text.isdigit() or len(text) > 19:
        raise ApiError(422, "invalid", "Last-Event-ID is not an event id of this stream")
    return int(text)


@router.get(
    "/events",
    summary="New and changed approvals the caller may see, as Server-Sent Events",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/event-stream": {}}}},
)
async def events(
    request: Request,
    identity: Caller,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID", max_length=40)] = None,
    since: Annotated[
        int | None,
        Query(ge=0, le=2**63 - 1, description="a journal position (an event id) to resume after"),
    ] = None,
) -> StreamingResponse:
    service = service_of(request)
    after = _since(last_event_id, since)
    if after is not None:
        try:
            await service.feed.check_since(after)
        except InvalidEvent as e:
            raise ApiError(422, "invalid", "Last-Event-ID is not an event id of this stream") from e
    return StreamingResponse(
        _stream(service, identity, after), media_type="text/event-stream", headers=_HEADERS
    )


async def _stream(service: Service, identity: Identity, after: int | None) -> AsyncIterator[bytes]:
    changes = service.feed.changes(since=after)
    ends = time.monotonic() + service.stream_seconds
    pending: asyncio.Future[ApprovalChange] | None = None
    yield _RETRY
    stopping = asyncio.ensure_future(service.stopping.wait())
    try:
        while (left := ends - time.monotonic()) > 0 and not service.stopping.is_set():
            if pending is None:
                pending = asyncio.ensure_future(anext(changes))
            waiting: set[asyncio.Future[Any]] = {pending, stopping}
            done, _ = await asyncio.wait(
                waiting,
                timeout=min(left, service.keepalive_seconds),
                return_when=asyncio.FIRST_COMPLETED,
            )
            if stopping in done:
                break  # the server stops: end the response whole, the client reconnects
            if not done:
                yield KEEPALIVE
                continue
            try:
                change, pending = pending.result(), None
                frame = await _frame(service, identity, change)
            except DatabaseUnavailable:
                # The response has started: end it whole, the client reconnects (`retry`).
                log.warning("event stream ends: the database is unavailable")
                pending = None
                break
            if frame is not None:
                yield frame
    finally:
        for task in (pending, stopping):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                    await task
        await changes.aclose()


async def _frame(service: Service, identity: Identity, change: ApprovalChange) -> bytes | None:
    """The event for `change`, or None when the caller may not see its approval."""
    try:
        approval = await service.store.get(change.approval_id)
    except (UnknownApproval, InvalidApprovalRequest):
        return None
    if not may_see(identity, approval):
        return None
    data = {**change.to_json(), "approval": approval_document(approval, args=None)}
    return sse_format(change.position, change.event, data)
