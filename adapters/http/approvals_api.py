"""`/v1/approvals`: what the caller may decide and what was decided, one approval, and
deciding it.

A reviewer sees only the approvals whose policy admits it (approvers, the directory's groups);
an auditor sees every one and decides none. A decision is made as the authenticated identity,
never a name in the body, and the store checks the policy again in the deciding transaction:
a refusal records nothing. A client's request id (`Idempotency-Key`, or `request_id` in the
body) makes a decision idempotent: it is recorded with the decision, so a retry through any
replica finds the first answer.

`POST /v1/approvals/{id}/reveal` gives the arguments, what led to the call and the reviews'
reasons in clear to whoever may see the approval (a reviewer its policy admits, an auditor),
the fields its policy marks sensitive only with `?sensitive=true` (`revealing`), and records
in the journal (`ledger.revealed` on `reveal:<approval id>`, signed by the service, with
whether sensitive fields were shown) that this identity read them, before they are sent.
Auditors may, as they may reveal a call's arguments (`calls_api`): proving what ran needs what
was asked. With an `Idempotency-Key`, recorded in the event, a retry by the same identity of
the same reveal records nothing new.

Approvals are shown as `shapes.approval_document` (ours, HITL's and Agent Inbox's; no
arguments), and a decide body is read by `shapes.decision_from_body` (any of the three).
"""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Header, Query, Request, Response

from approvals import (
    Approval,
    ApprovalAlreadyDecided,
    ApprovalStatus,
    ApprovalStore,
    Decision,
    DecisionNotAllowed,
    Identity,
    InvalidApprovalRequest,
    Reviewer,
    UnknownApproval,
)
from approvals.model import identifier
from approvals.store import PageCursor
from ledger.audit.reveals import record_reveal
from ledger.errors import SignoffError
from ledger.log import get_logger

from .errors import ApiError, reason, refusal_of
from .revealing import revealed_document
from .service import Service
from .shapes import approval_document, decision_from_body
from .standby import reading_store

__all__ = [
    "IDEMPOTENCY_HEADER",
    "Caller",
    "IdempotencyKey",
    "may_see",
    "optional_request_id",
    "request_id_of",
    "router",
    "service_of",
]

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


MAX_REQUEST_ID = 200
IDEMPOTENCY_HEADER = "Idempotency-Key"

# The client's request id as a header, which every endpoint that records something takes.
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias=IDEMPOTENCY_HEADER,
        max_length=MAX_REQUEST_ID,
        description="The client's request id (else `request_id` in the body)",
    ),
]

_BODY_DESCRIPTION = """A decision in any of three shapes (`adapters.http.shapes`):
ours, `{"decision": "approve"|"reject"|"edit"|"respond", "args"?, "reason"?, "message"?}`;
a LangChain HITL decision, `{"type": "approve"|"reject"|"edit"|"respond", ...}` (also as
`{"decisions": [one]}`); or an Agent Inbox `HumanResponse`,
`{"type": "accept"|"ignore"|"response"|"edit", "args"}`. The client's request id goes in the
`Idempotency-Key` header, or as `request_id` beside any of them."""


def request_id_of(header: str | None, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The client's request id (the `Idempotency-Key` header's value, or the body's
    `request_id`), and the body without it: the decision's shapes know no such field.

    Raises:
        ApiError: 422, none, both and different, or not 1 to 200 characters of text.
    """
    field = body.get("request_id")
    rest = {k: v for k, v in body.items() if k != "request_id"}
    if header is not None and field is not None and header != field:
        raise ApiError(422, "invalid", f"{IDEMPOTENCY_HEADER} and request_id differ")
    value = header if header is not None else field
    if value is None:
        raise ApiError(
            422,
            "invalid",
            f"a decision needs a client request id: an {IDEMPOTENCY_HEADER} header or a "
            "request_id field",
        )
    if not isinstance(value, str) or not 1 <= len(value.strip()) <= MAX_REQUEST_ID:
        raise ApiError(422, "invalid", f"a request id is 1 to {MAX_REQUEST_ID} characters of text")
    return value, rest


def optional_request_id(header: str | None, field: str | None = None) -> str | None:
    """The client's request id where one is optional (a reveal, a resolution): the header's or the
    body's `request_id` field, None without either; refused as `request_id_of` refuses it."""
    if header is None and field is None:
        return None
    return request_id_of(header, {} if field is None else {"request_id": field})[0]


def may_see(identity: Identity, approval: Approval) -> bool:
    """Whether `identity` may see `approval`: an auditor every one, a reviewer those whose
    policy admits it, as the listing and a decision judge it (a policy that names nobody
    admits only the reviewers the directory lists)."""
    if not identity.may_decide:  # an auditor reads every approval
        return True
    approvers = approval.policy.approvers
    reviewer = Reviewer(identity.reviewer, identity.groups)
    return reviewer.matches(approvers) and (bool(approvers) or identity.listed)


def not_admitted(identity: Identity, approval: Approval) -> ApiError:
    """The 403 for a caller `may_see` refuses, saying why."""
    if not approval.policy.approvers and not identity.listed:
        why = "this approval's policy admits only reviewers the directory lists: you are not one"
    else:
        why = "this approval's policy does not admit you"
    return ApiError(403, "forbidden", why)


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


async def _visible(
    service: Service, identity: Identity, approval_id: str, store: ApprovalStore | None = None
) -> Approval:
    try:
        approval = await (store or service.store).get(approval_id)
    except (UnknownApproval, InvalidApprovalRequest) as e:
        raise ApiError(404, "not_found", f"no approval {approval_id}") from e
    if not may_see(identity, approval):
        raise not_admitted(identity, approval)
    return approval


# `status=`: one status, or a set of them by name.
_FINAL = tuple(s for s in ApprovalStatus if s.final)
_STATUS_SETS = {"decided": _FINAL, "all": tuple(ApprovalStatus)}
_STATUS_NAMES = ", ".join([*_STATUS_SETS, *ApprovalStatus])


def _statuses(text: str) -> tuple[ApprovalStatus, ...]:
    if text in _STATUS_SETS:
        return _STATUS_SETS[text]
    try:
        return (ApprovalStatus(text),)
    except ValueError:
        raise ApiError(422, "invalid", f"status is one of {_STATUS_NAMES}") from None


@router.get(
    "",
    summary="Approvals the caller may see: pending oldest first, others newest decision first",
)
async def listing(
    request: Request,
    response: Response,
    identity: Caller,
    status: Annotated[
        str,
        Query(
            max_length=20,
            description="pending (the default), decided (every final status), all, or one "
            "status (approved, rejected, edited, responded, expired, cancelled)",
        ),
    ] = "pending",
    run_id: Annotated[str | None, Query(max_length=200)] = None,
    tool: Annotated[str | None, Query(max_length=200)] = None,
    requested_by: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
    cursor: Annotated[str | None, Query(max_length=1000)] = None,
) -> dict[str, Any]:
    statuses = _statuses(status)  # malformed names and cursors: 422 by the error table
    store = await reading_store(request, response, identity)  # a reviewer's: the primary
    reviewer = identity.reviewer if identity.may_decide else None
    if statuses == (ApprovalStatus.PENDING,):
        page, after = await store.pending_page(
            reviewer=reviewer,
            run_id=run_id,
            tool=tool,
            requested_by=requested_by,
            after=_cursor_of(cursor),
            limit=limit,
        )
    else:
        page, after = await store.history_page(
            statuses,
            reviewer=reviewer,
            run_id=run_id,
            tool=tool,
            requested_by=requested_by,
            after=_cursor_of(cursor),
            limit=limit,
        )
    documents = [approval_document(a, args=None) for a in page]
    return {"approvals": documents, "next_cursor": _cursor_text(after)}


@router.get("/{approval_id}", summary="One approval, when its policy admits the caller")
async def one(
    request: Request, response: Response, approval_id: str, identity: Caller
) -> dict[str, Any]:
    store = await reading_store(request, response, identity)
    approval = await _visible(service_of(request), identity, approval_id, store)
    return approval_document(approval, args=None)


@router.post(
    "/{approval_id}/reveal",
    summary="The approval's arguments in clear, to a caller who may see it (recorded first)",
)
async def reveal(
    request: Request,
    response: Response,
    approval_id: str,
    identity: Caller,
    idempotency_key: IdempotencyKey = None,
    sensitive: Annotated[
        bool, Query(description="also show the fields the policy marks sensitive")
    ] = False,
) -> dict[str, Any]:
    service = service_of(request)
    request_id = optional_request_id(idempotency_key)
    await _visible(service, identity, approval_id)
    approval = await service.store.get(approval_id, reveal=True)
    revealed = await revealed_document(service.store, approval, sensitive=sensitive)
    recorded = await record_reveal(
        service.db,
        service.ring,
        f"reveal:{approval_id}",
        identity.reviewer,
        request_id=request_id,
        approval_id=approval_id,
        sensitive=revealed.shows_sensitive,
    )
    if not recorded:  # a retry: its reveal is in the journal already
        response.headers["Idempotent-Replayed"] = "true"
    log.info(
        "revealed" if recorded else "reveal replayed",
        approval_id=approval_id,
        reviewer=identity.reviewer,
        request_id=request_id,
        sensitive=revealed.shows_sensitive,
    )
    return revealed.document


@router.post(
    "/{approval_id}/decision",
    summary="Decide an approval as the authenticated reviewer (idempotent by request id)",
)
async def decide(
    request: Request,
    response: Response,
    approval_id: str,
    body: Annotated[dict[str, Any], Body(description=_BODY_DESCRIPTION)],
    identity: Caller,
    idempotency_key: IdempotencyKey = None,
) -> dict[str, Any]:
    service = service_of(request)
    request_id, body = request_id_of(idempotency_key, body)
    bound = log.bind(approval_id=approval_id, reviewer=identity.reviewer, request_id=request_id)
    if not identity.may_decide:
        raise ApiError(403, "forbidden", "an auditor's token reads and never decides")
    try:
        identifier(approval_id, "approval id")
    except InvalidApprovalRequest as e:
        raise ApiError(404, "not_found", f"no approval {approval_id}") from e
    seen: Approval | None = None

    def decision_of(approval: Approval) -> Decision:
        """The body's decision on the approval as the store read it (with the request id's
        earlier decision and the reviewer's groups, in one statement): refused as reading it
        would be, before anything is recorded."""
        nonlocal seen
        seen = approval
        if not may_see(identity, approval):
            raise not_admitted(identity, approval)
        try:
            return decision_from_body(body, approval)
        except SignoffError as e:  # as the error table answers it, whatever the store does next
            if (refusal := refusal_of(e)) is None:
                raise
            raise ApiError(refusal.status, refusal.code, refusal.message(e)) from e

    try:
        decided = await service.store.decide_as_read(
            approval_id, decision_of, identity.reviewer, request_id=request_id
        )
    except UnknownApproval as e:
        raise ApiError(404, "not_found", f"no approval {approval_id}") from e
    except (ApprovalAlreadyDecided, DecisionNotAllowed) as e:
        # Voting again (another request of the same reviewer) conflicts with its first vote;
        # so does this request id with another decision.
        conflict = isinstance(e, ApprovalAlreadyDecided) or (
            seen is not None and identity.reviewer in seen.approvers
        )
        status, code = (409, "conflict") if conflict else (403, "forbidden")
        bound.info("decision refused", status=status, problem=type(e).__name__)
        raise ApiError(status, code, reason(e)) from e
    kind = decided.decision.kind
    if decided.replayed:  # a retry: its decision is in the journal already
        response.headers["Idempotent-Replayed"] = "true"
        bound.info("decision replayed", decision=str(kind))
        return approval_document(decided.approval, args=None)
    service.metrics.decisions.labels(decision=str(kind)).inc()
    service.metrics.approval_final(decided.approval)  # none while a quorum waits for votes
    bound.info("decided", decision=str(kind), status=str(decided.approval.status))
    return approval_document(decided.approval, args=None)
