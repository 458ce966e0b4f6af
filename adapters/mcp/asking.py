"""What the gateway asks the person at the client, in MCP's elicitation terms.

Four-eyes: a URL-mode elicitation that opens the approval in the inbox; the client learns
nothing but the URL, and `accept` only means its user agreed to open it. Self-confirm: a
form-mode elicitation with `approve` (a boolean) and, when the policy allows edits, one field per
plain argument (text, number, integer, boolean; never a sensitive one), prefilled.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import mcp_types as types

from adapters.runtime import ToolSpec
from approvals import Approval, ApprovalPolicy, Decision, DecisionKind

__all__ = ["APPROVAL_KEY", "approval_url", "decision_of_form", "form_params", "url_params"]

APPROVAL_KEY = "approval"
"""The key of the gateway's one input request (2026-07-28 `inputRequests`)."""
_SHOWN_VALUE = 200
_SHOWN_TOTAL = 2000
_PLAIN: dict[str, type | tuple[type, ...]] = {
    "string": str,
    "number": (int, float),
    "integer": int,
    "boolean": bool,
}


def approval_url(public_url: str, approval_id: str) -> str:
    return f"{public_url}/inbox/approvals/{approval_id}"


def url_params(
    public_url: str, spec: ToolSpec, approval: Approval, *, with_id: bool
) -> types.ElicitRequestURLParams:
    """The URL-mode request; `with_id` (2025-11-25) names the elicitation by the approval's id,
    which `notifications/elicitation/complete` names again once it is decided."""
    return types.ElicitRequestURLParams(
        message=f"{spec.name} needs a reviewer's approval ({approval.approval_id}): open the link "
        "to see it; the call goes on once it is decided.",
        url=approval_url(public_url, approval.approval_id),
        elicitation_id=approval.approval_id if with_id else None,
    )


def form_params(spec: ToolSpec, args: Mapping[str, Any]) -> types.ElicitRequestFormParams:
    """The self-confirm form for a call of `spec` with `args`."""
    policy = spec.approval or ApprovalPolicy()
    properties: dict[str, Any] = {
        "approve": {
            "type": "boolean",
            "title": f"Run {spec.name}?",
            "description": "Yes runs the call once; no rejects it.",
            "default": False,
        }
    }
    for name, field_type in _editable(policy, args).items():
        properties[name] = {"type": field_type, "title": name, "default": args[name]}
    return types.ElicitRequestFormParams(
        message=f"{spec.name} asks to run with {_shown(args, policy.sensitive)}",
        requested_schema={"type": "object", "properties": properties, "required": ["approve"]},
    )


def _shown(args: Mapping[str, Any], sensitive: frozenset[str]) -> str:
    """The arguments as the person reads them: every name (a long value must not push the
    others out of sight), each value cut to a few hundred characters, and any cut said."""
    parts: list[str] = []
    for count, name in enumerate(sorted(args)):
        if sum(map(len, parts)) > _SHOWN_TOTAL:
            parts.append(f"... and {len(args) - count} more arguments not shown")
            break
        value = '"(sensitive)"' if name in sensitive else json.dumps(args[name], sort_keys=True)
        parts.append(f"{_cut(json.dumps(name))}: {_cut(value)}")
    return "{" + ", ".join(parts) + "}"


def _cut(text: str) -> str:
    if len(text) <= _SHOWN_VALUE:
        return text
    return f"{text[:_SHOWN_VALUE]}... ({len(text) - _SHOWN_VALUE} more characters)"


def decision_of_form(
    spec: ToolSpec, args: Mapping[str, Any], content: Mapping[str, Any] | None
) -> Decision:
    """The decision a submitted form gives: approve, an edit (a changed field), or reject.

    Raises:
        ValueError: the form is not the one asked (no boolean `approve`, a field of the wrong
            type or one that was not offered).
    """
    content = dict(content or {})
    approve = content.pop("approve", None)
    if not isinstance(approve, bool):
        raise ValueError("the form's answer has no boolean 'approve'")
    if not approve:
        return Decision.reject("declined by the person at the client")
    editable = _editable(spec.approval or ApprovalPolicy(), args)
    edited = dict(args)
    for name, value in content.items():
        if name not in editable or not _is(value, editable[name]):
            raise ValueError(f"the form's answer has a field {name!r} that was not offered")
        edited[name] = value
    return Decision.approve() if edited == dict(args) else Decision.edit(edited)


def _editable(policy: ApprovalPolicy, args: Mapping[str, Any]) -> dict[str, str]:
    """Argument name -> JSON type of the fields the form offers to edit."""
    if DecisionKind.EDIT not in policy.allowed:
        return {}
    schema = policy.args_schema or {}
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return {}
    fields: dict[str, str] = {}
    for name, prop in properties.items():
        field_type = prop.get("type") if isinstance(prop, Mapping) else None
        if name == "approve" or name in policy.sensitive or field_type not in _PLAIN:
            continue
        if name in args and _is(args[name], field_type):
            fields[name] = field_type
    return fields


def _is(value: Any, field_type: str) -> bool:
    if isinstance(value, bool) and field_type != "boolean":
        return False
    return isinstance(value, _PLAIN[field_type])
