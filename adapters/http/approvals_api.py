"""`/v1/approvals`: what the caller may decide, one approval, and deciding it.

A reviewer sees only the approvals whose policy admits it (approvers, the directory's groups);
an auditor sees every one and decides none. A decision is made as the authenticated identity,
never a name in the body, and the store checks the policy again in the deciding transaction:
a refusal records nothing. `request_id` makes a decision idempotent: it is recorded with the
decision, so a retry through any replica finds the first answer.

The decision body is parsed by `decision_of` alone, so other shapes (LangChain HITL decisions,
Agent Inbox responses) can be accepted beside it by replacing that one function.
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from approvals import (
    Approval,
    ApprovalAlreadyDecided,
    ApprovalExpired,
    Decision,
    DecisionKind,
    DecisionNotAllowed,
    Identity,
    InvalidApprovalRequest,
    Reviewer,
    UnknownApproval,
)
from approvals.store import PageCursor
from ledger.log import get_logger

from .errors import ApiError
from .service import Service

__all__ = ["DecisionBody", "approval_json", "decision_of", "router"]

log = get_logger(__name__)

router = APIRouter(prefix="/v1/approvals", tags=["approvals"])

MAX_PAGE = 200


def service_of(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


async def identity_of(request: Request) -> Identity:
    identity: Identity = await service_of(request).authentication.identify(request)
    request.state.identity = identity  # for the request log
    return identity


Caller = Annotated[Identity, Depends(identity_of)]


class DecisionBody(BaseModel):
    """Signoff's own decision body."""

    model_config = ConfigDict(extra="forbid")

    decision: Literal["approve", "reject", "edit", "respond"]
    request_id: str = Field(min_length=1, max_length=200)
    args: dict[str, Any] | None = None
    reason: str | None = None
    message: str | None = None


def decision_of(body: DecisionBody) -> Decision:
    """The store's `Decision` for a body.

    Raises:
        ApiError: 422, fields that do not go with the decision.
    """
    kind = DecisionKind(body.decision)
    extra = {
        "args": body.args is not None and kind is not DecisionKind.EDIT,
        "message": body.message is not None and kind is not DecisionKind.RESPOND,
        "reason": body.reason is not None and kind is not DecisionKind.REJECT,
    }
    if wrong := [name for name, bad in extra.items() if bad]:
        raise ApiError(422, "invalid", f"{', '.join(wrong)} do not go with {kind}")
    if kind is DecisionKind.EDIT:
        if body.args is None:
            raise ApiError(422, "invalid", "an edit needs args (a JSON object)")
        return Decision.edit(body.args)
    if kind is DecisionKind.RESPOND:
        if body.message is None:
            raise ApiError(422, "invalid", "a respond needs a message")
        return Decision.respond(body.message)
    if kind is DecisionKind.REJECT:
        return Decision.reject(body.reason)
    return Decision.approve()


def _when(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def approval_json(approval: Approval) -> dict[str, Any]:
    """An approval as the API shows it: no arguments, no sealed values, no signatures."""
    return {
        "approval_id": approval.approval_id,
        "run_id": approval.run_id,
        "thread_id": approval.thread_id,
        "tool": approval.tool,
        "kind": approval.kind,
        "call_id": approval.call_id,
        "status": str(approval.status),
        "requested_by": approval.requested_by,
        "requested_at": _when(approval.requested_at),
        "expires_at": _when(approval.expires_at),
        "policy": approval.policy.to_json(),
        "votes": [
            {
                "reviewer": r.reviewer,
                "decision": str(r.decision),
                "at": _when(r.at),
                "groups": list(r.groups or ()),
            }
            for r in approval.reviews
        ],
        "decided_by": list(approval.decided_by),
        "decided_at": _when(approval.decided_at),
        "consumed": approval.consumed,
        "version": approval.version,
    }


def _may_see(identity: Identity, approval: Approval) -> bool:
    if not identity.may_decide:  # an auditor reads every approval
        return True
    return Reviewer(identity.reviewer, identity.groups).matches(approval.policy.approvers)


def _cursor_text(cursor: PageCursor | None) -> str | None:
    if cursor is None:
        return None
    raw = json.dumps([cursor[0].isoformat(), cursor[1]]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _cursor_of(text: str | None) -> PageCursor | None:
    if text is None:
        return None
    try:
        at, approval_id = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        when = datetime.fromisoformat(at)
        if not isinstance(approval_id, str) or when.tzinfo is None:
            raise ValueError("not a cursor")
    except (ValueError, TypeError, binascii.Error) as e:
        raise ApiError(422, "invalid", "cursor is not one this API gave") from e
    return when, approval_id


async def _visible(service: Service, identity: Identity, approval_id: str) -> Approval:
    try:
        approval = await service.store.get(approval_id)
    except (UnknownApproval, InvalidApprovalRequest) as e:
        raise ApiError(404, "not_found", f"no approval {approval_id}") from e
    if not _may_see(identity, approval):
        raise ApiError(403, "forbidden", "this approval's policy does not admit you")
    return approval


@router.get("", summary="Pending approvals the caller may decide, oldest first")
async def pending(
    request: Request,
    identity: Caller,
    run_id: Annotated[str | None, Query(max_length=200)] = None,
    tool: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    cursor: Annotated[str | None, Query(max_length=1000)] = None,
) -> dict[str, Any]:
    service = service_of(request)
    try:
        page, after = await service.store.pending_page(
            reviewer=identity.reviewer if identity.may_decide else None,
            run_id=run_id,
            tool=tool,
            after=_cursor_of(cursor),
            limit=limit,
        )
    except InvalidApprovalRequest as e:
        raise ApiError(422, "invalid", str(e)) from e
    return {"approvals": [approval_json(a) for a in page], "next_cursor": _cursor_text(after)}


@router.get("/{approval_id}", summary="One approval, when its policy admits the caller")
async def one(request: Request, approval_id: str, identity: Caller) -> dict[str, Any]:
    return approval_json(await _visible(service_of(request), identity, approval_id))


@router.post(
    "/{approval_id}/decision",
    summary="Decide an approval as the authenticated reviewer (idempotent by request_id)",
)
async def decide(
    request: Request,
    response: Response,
    approval_id: str,
    body: DecisionBody,
    identity: Caller,
) -> dict[str, Any]:
    service = service_of(request)
    bound = log.bind(
        approval_id=approval_id, reviewer=identity.reviewer, request_id=body.request_id
    )
    if not identity.may_decide:
        raise ApiError(403, "forbidden", "an auditor's token reads and never decides")
    decision = decision_of(body)
    await _visible(service, identity, approval_id)

    async def replayed() -> dict[str, Any] | None:
        """The answer to this request if it was recorded before (a retry), else None."""
        earlier = await service.store.decision_of_request(
            approval_id, identity.reviewer, body.request_id
        )
        if earlier is None:
            return None
        if earlier is not decision.kind:
            raise ApiError(409, "conflict", f"request_id {body.request_id!r} was a {earlier}")
        response.headers["Idempotent-Replayed"] = "true"
        bound.info("decision replayed", decision=str(earlier))
        return approval_json(await service.store.get(approval_id))

    if (answer := await replayed()) is not None:
        return answer
    try:
        approval = await service.store.decide(
            approval_id, decision, identity.reviewer, request_id=body.request_id
        )
    except (ApprovalAlreadyDecided, DecisionNotAllowed) as e:
        if (answer := await replayed()) is not None:  # the same request, racing itself
            return answer
        # Voting again (another request of the same reviewer) conflicts with its first vote.
        conflict = (
            isinstance(e, ApprovalAlreadyDecided)
            or identity.reviewer in (await service.store.get(approval_id)).approvers
        )
        status, code = (409, "conflict") if conflict else (403, "forbidden")
        bound.info("decision refused", status=status, problem=type(e).__name__)
        raise ApiError(status, code, _reason(e)) from e
    except ApprovalExpired as e:
        raise ApiError(409, "expired", "the approval expired before a decision") from e
    except InvalidApprovalRequest as e:
        raise ApiError(422, "invalid", _reason(e)) from e
    bound.info("decided", decision=str(decision.kind), status=str(approval.status))
    return approval_json(approval)


def _reason(error: Exception) -> str:
    """The store's message without its `approval <id>: ` prefix (the URL names it)."""
    text = str(error)
    return text.split(": ", 1)[1] if text.startswith("approval ") and ": " in text else text
