"""LangChain HumanInTheLoopMiddleware's decisions, read strictly: what a reviewer may answer an
approval with, and one HITL decision as a `Decision`.

Shared by the LangGraph adapter (resume values) and the HTTP service (decide bodies), so both
read the same shapes the same way and refuse the same malformed ones before anything is
written.
"""

from __future__ import annotations

from typing import Any

from approvals import ApprovalPolicy, Decision, DecisionKind, InvalidApprovalRequest

__all__ = ["decidable", "edited_args", "hitl_decision", "one_decision"]

# The fields each HITL decision may carry besides its `type`.
_FIELDS: dict[DecisionKind, frozenset[str]] = {
    DecisionKind.APPROVE: frozenset(),
    DecisionKind.REJECT: frozenset({"message"}),
    DecisionKind.EDIT: frozenset({"edited_action"}),
    DecisionKind.RESPOND: frozenset({"message"}),
}


def decidable(policy: ApprovalPolicy) -> tuple[DecisionKind, ...]:
    """The decisions a reviewer can give under `policy`, in `DecisionKind` order: the allowed
    ones, without edit and respond under a quorum (an edit or an answer needs one owner)."""
    return tuple(
        kind
        for kind in DecisionKind
        if kind in policy.allowed
        and (policy.quorum == 1 or kind in (DecisionKind.APPROVE, DecisionKind.REJECT))
    )


def one_decision(value: dict[str, Any]) -> Any:
    """The decision of a batch of one (`{"decisions": [d]}`), else `value` itself.

    Raises:
        InvalidApprovalRequest: a batch that is not a list of exactly one, or that carries
            anything besides `decisions`.
    """
    if "decisions" not in value:
        return value
    batch = value["decisions"]
    if set(value) != {"decisions"} or not isinstance(batch, list) or len(batch) != 1:
        raise InvalidApprovalRequest("`decisions` is a list of one decision, for one tool call")
    return batch[0]


def hitl_decision(value: Any, tool: str) -> Decision:
    """One HITL decision for a call of `tool`: `{"type": "approve"}`, `{"type": "reject",
    "message"?}`, `{"type": "edit", "edited_action": {"name", "args"}}` or `{"type":
    "respond", "message"}`.

    Raises:
        InvalidApprovalRequest: not one of those (an unknown type or field, an edit of another
            tool, arguments that are not an object, a message that is not text).
    """
    if not isinstance(value, dict):
        raise InvalidApprovalRequest(f"a decision is a JSON object, not {type(value).__name__}")
    kind = _kind(value.get("type"))
    extra = sorted(str(k) for k in value if k != "type" and k not in _FIELDS[kind])
    if extra:
        raise InvalidApprovalRequest(f"a {kind} decision carries no {', '.join(extra)}")
    message = value.get("message")
    if message is not None and not isinstance(message, str):
        raise InvalidApprovalRequest(f"a message is text, not {type(message).__name__}")
    if kind is DecisionKind.EDIT:
        return Decision.edit(edited_args(value.get("edited_action"), tool, "name"))
    if kind is DecisionKind.REJECT:
        return Decision.reject(message)
    if kind is DecisionKind.RESPOND:
        if message is None:
            raise InvalidApprovalRequest("a respond decision needs a message")
        return Decision.respond(message)
    return Decision.approve()


def edited_args(action: Any, tool: str, name_key: str) -> dict[str, Any]:
    """The arguments of an edited action (`{name_key: tool, "args": {...}}`) for `tool`.

    Raises:
        InvalidApprovalRequest: not such an object, or an action of another tool.
    """
    if not isinstance(action, dict) or set(action) != {name_key, "args"}:
        raise InvalidApprovalRequest(f"an edited action is {{{name_key!r}, 'args'}} and no more")
    if action[name_key] != tool:
        raise InvalidApprovalRequest(
            f"the edited action is for {str(action[name_key])[:100]!r}; this call is {tool!r}, "
            "and an edit cannot switch tools (the approval is bound to this one): reject the "
            "call instead"
        )
    args = action["args"]
    if not isinstance(args, dict):
        raise InvalidApprovalRequest(f"edited args are a JSON object, not {type(args).__name__}")
    return args


def _kind(value: Any) -> DecisionKind:
    if isinstance(value, str) and value in _KINDS:
        return DecisionKind(value)
    shown = repr(value)[:100] if isinstance(value, str) else type(value).__name__
    raise InvalidApprovalRequest(f"a decision's type is one of {', '.join(_KINDS)}, not {shown}")


_KINDS = tuple(str(k) for k in DecisionKind)
