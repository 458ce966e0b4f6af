"""An approval in the shapes reviewers' tools already know, and a decide body in any of them.

Pure functions, no web framework. A document carries our own JSON of the approval plus the
request as LangChain's HumanInTheLoopMiddleware asks it (`hitl`: action requests and review
configs) and as Agent Inbox shows it (`agent_inbox`: a `HumanInterrupt`). A decide body may be
our own, a HITL decision, or an Agent Inbox `HumanResponse`; anything malformed, ambiguous or
outside the policy is refused here, before anything is written.
"""

from __future__ import annotations

from typing import Any

from adapters.runtime.documents import approval_json, description_of
from adapters.runtime.hitl import decidable, edited_args, hitl_decision, one_decision
from approvals import (
    Approval,
    Decision,
    DecisionKind,
    DecisionNotAllowed,
    InvalidApprovalRequest,
)
from approvals.model import check_decision
from approvals.presentation import check_edit
from ledger.canonical import canonical_json
from ledger.errors import InvalidJson

__all__ = ["agent_inbox_request", "approval_document", "decision_from_body", "hitl_request"]

# Agent Inbox's `HumanResponse` types, and the config flag that allows each, by our kind.
_INBOX_KINDS = {
    "accept": DecisionKind.APPROVE,
    "ignore": DecisionKind.REJECT,
    "response": DecisionKind.RESPOND,
    "edit": DecisionKind.EDIT,
}
_INBOX_FLAGS = {
    DecisionKind.APPROVE: "allow_accept",
    DecisionKind.REJECT: "allow_ignore",
    DecisionKind.RESPOND: "allow_respond",
    DecisionKind.EDIT: "allow_edit",
}
# Our own body: which fields each decision may carry.
_OWN_FIELDS = {
    DecisionKind.APPROVE: frozenset({"decision", "reason"}),
    DecisionKind.REJECT: frozenset({"decision", "reason"}),
    DecisionKind.EDIT: frozenset({"decision", "reason", "args"}),
    DecisionKind.RESPOND: frozenset({"decision", "reason", "message"}),
}
_HITL_ONLY = frozenset({"type", "decisions", "edited_action"})
_SHOWN = 100  # characters of a refused value quoted back


def hitl_request(approval: Approval, args: dict[str, Any] | None) -> dict[str, Any]:
    """HumanInTheLoopMiddleware's batched request for this one call (`args` None: not
    revealed)."""
    return {
        "action_requests": [
            {"name": approval.tool, "args": args, "description": description_of(approval)}
        ],
        "review_configs": [
            {
                "action_name": approval.tool,
                "allowed_decisions": [str(k) for k in decidable(approval.policy)],
            }
        ],
    }


def agent_inbox_request(approval: Approval, args: dict[str, Any] | None) -> dict[str, Any]:
    """Agent Inbox's `HumanInterrupt` for this call (`args` None: not revealed)."""
    allowed = decidable(approval.policy)
    return {
        "action_request": {"action": approval.tool, "args": args},
        "config": {flag: kind in allowed for kind, flag in _INBOX_FLAGS.items()},
        "description": description_of(approval),
    }


def approval_document(approval: Approval, *, args: dict[str, Any] | None) -> dict[str, Any]:
    """Our JSON of an approval (`runtime.documents.approval_json`), the decisions its policy
    lets a reviewer give, its description, its arguments when given (their reveal is the
    caller's to authorize and record), and the request as `hitl` and `agent_inbox` show it.

    `approval.args` is never read: only what the caller passes is shown.
    """
    document = approval_json(approval)
    document["allowed_decisions"] = [str(k) for k in decidable(approval.policy)]
    document["description"] = description_of(approval)
    if args is not None:
        document["args"] = args
    document["hitl"] = hitl_request(approval, args)
    document["agent_inbox"] = agent_inbox_request(approval, args)
    return document


def decision_from_body(body: Any, approval: Approval) -> Decision:
    """The decision a decide body gives on `approval`.

    Bodies:
        ours: `{"decision": "approve"|"reject"|"edit"|"respond", "args"?, "reason"?,
            "message"?}` (`args` with edit only, `message` with respond only).
        HITL: `{"type": "approve"|"reject"|"edit"|"respond", ...}` (`runtime.hitl`), also as
            `{"decisions": [one]}`.
        Agent Inbox `HumanResponse`: `{"type": "accept"|"ignore"|"response"|"edit", "args"}`;
            ignore is a reject, a response answers with `args` (text), an edit runs
            `args.args` (its `action` must be this tool), an accept's `args` (if any) must be
            this call as asked.

    Raises:
        InvalidApprovalRequest: not one of these, ambiguous between them, or malformed (an
            edit of another tool, arguments that are not an object, cannot be stored or do not
            fit the policy's `args_schema`, text that is not text); nothing was recorded.
        DecisionNotAllowed: the approval's policy does not allow that decision.
    """
    if not isinstance(body, dict):
        raise InvalidApprovalRequest(f"a decide body is a JSON object, not {type(body).__name__}")
    if "decision" in body:
        if _HITL_ONLY & body.keys():
            raise InvalidApprovalRequest("a body is ours (`decision`) or HITL (`type`), not both")
        decision = _own(body)
    else:
        value = one_decision(body)
        if isinstance(value, dict) and _inbox_shaped(value):
            decision = _inbox(value, approval)
        else:
            decision = hitl_decision(value, approval.tool)
    try:
        check_decision(decision)
    except InvalidJson as e:  # arguments that cannot be stored
        raise InvalidApprovalRequest(f"edited args: {e}") from e
    if decision.kind not in decidable(approval.policy):
        raise DecisionNotAllowed(
            approval.approval_id, f"its policy does not allow {decision.kind} decisions"
        )
    if decision.kind is DecisionKind.EDIT and decision.args is not None:  # and where recorded
        check_edit(approval.policy.args_schema, decision.args, approval.tool)
    return decision


def _own(body: dict[Any, Any]) -> Decision:
    value = body["decision"]
    if not isinstance(value, str) or value not in _KINDS:
        shown = repr(value)[:_SHOWN] if isinstance(value, str) else type(value).__name__
        raise InvalidApprovalRequest(f"`decision` is one of {', '.join(_KINDS)}, not {shown}")
    kind = DecisionKind(value)
    extra = sorted(repr(k)[:_SHOWN] for k in body if k not in _OWN_FIELDS[kind])
    if extra:
        raise InvalidApprovalRequest(f"a {kind} decision carries no {', '.join(extra)}")
    reason = _text(body.get("reason"), "reason")
    if kind is DecisionKind.EDIT:
        args = body.get("args")
        if not isinstance(args, dict):
            raise InvalidApprovalRequest(f"an edit's args are a JSON object, not {_type(args)}")
        return Decision(kind, reason=reason, args=args)
    if kind is DecisionKind.RESPOND:
        message = _text(body.get("message"), "message")
        if message is None:
            raise InvalidApprovalRequest("a respond decision needs a message")
        return Decision(kind, reason=reason, message=message)
    return Decision(kind, reason=reason)


def _inbox_shaped(value: dict[Any, Any]) -> bool:
    """Whether a body typed like Agent Inbox's is one: `edit` is a type of both shapes, and
    only HITL's carries `edited_action`."""
    kind = value.get("type")
    if not isinstance(kind, str) or kind not in _INBOX_KINDS:
        return False
    return kind != "edit" or "edited_action" not in value


def _inbox(value: dict[Any, Any], approval: Approval) -> Decision:
    kind = _INBOX_KINDS[value["type"]]
    extra = sorted(repr(k)[:_SHOWN] for k in value if k not in ("type", "args"))
    if extra:
        raise InvalidApprovalRequest(f"a HumanResponse carries no {', '.join(extra)}")
    args = value.get("args")
    if kind is DecisionKind.RESPOND:
        message = _text(args, "a response's args")
        if message is None:
            raise InvalidApprovalRequest("a response needs its text in `args`")
        return Decision.respond(message)
    if kind is DecisionKind.EDIT:
        return Decision.edit(edited_args(args, approval.tool, "action"))
    if args is not None:
        if kind is DecisionKind.REJECT:
            raise InvalidApprovalRequest("an ignore carries no args")
        _same_request(args, approval)
    return Decision.reject() if kind is DecisionKind.REJECT else Decision.approve()


def _same_request(args: Any, approval: Approval) -> None:
    """An accept that names the request it accepts must name this one: an accept of other
    arguments would run these while the reviewer meant those."""
    accepted = edited_args(args, approval.tool, "action")
    if approval.args is None:
        return  # what runs is the call as asked and bound, whatever the body says
    try:
        same = canonical_json(accepted) == canonical_json(approval.args)
    except InvalidJson as e:
        raise InvalidApprovalRequest(f"accepted args: {e}") from e
    if not same:
        raise InvalidApprovalRequest(
            "an accept names other arguments than the call's; send an edit to change them"
        )


def _text(value: Any, what: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise InvalidApprovalRequest(f"{what} is text, not {_type(value)}")
    return value


def _type(value: Any) -> str:
    return "null" if value is None else type(value).__name__


_KINDS = tuple(str(k) for k in DecisionKind)
