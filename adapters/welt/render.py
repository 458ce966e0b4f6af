"""Outbound: Signoff approvals as Welt questions.

Each approval becomes one `interrupt` event whose id is the approval id, so an answer names the
approval it decides, in any process. The question shows the tool, its arguments as pretty JSON in
a code block (what the approval is bound to, read back from the store; the fields its policy
marks sensitive left out and named), the description, the approval id and expiry, and the
widgets the policy's decisions call for:

| allowed decision | widget | answer |
|---|---|---|
| approve | button *Approve* (primary) | `true` |
| reject | button *Reject* (danger) | `false` |
| respond | text field *Answer instead of running <tool>* | the typed text |
| edit | none; button *Decided elsewhere*, and the command | `"signoff:decided-elsewhere"` |

Edit has no widget on Welt's wire (a form for new arguments is beyond its shapes). A policy that
allows edit with other decisions gets the widgets for the others; a policy that allows only edit
is still rendered, never refused: the question says to decide it outside Slack
(`signoff approvals decide <id> --edit ...`) and offers one button, *Decided elsewhere*. That
button records nothing; it resumes the run, which then reads the store: decided, the tool runs
with the edited arguments; still pending, the question is asked again. Refusing to render would
end the Slack thread with an error while the run waits, with nothing in Slack to resume it;
letting Welt fall back to its default Approve / Deny buttons would offer decisions the policy
forbids. With a quorum above 1 only approve and reject are possible (the store's rule), so only
those buttons are shown.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any

from approvals import Approval, ApprovalStore, DecisionKind
from approvals.presentation import without_sensitive

from .errors import UnsupportedInterrupt
from .wire import MESSAGE_LIMIT, InputSpec, InterruptEvent, OptionSpec, Reason, interrupt_event

__all__ = [
    "APPROVE_VALUE",
    "DECIDED_ELSEWHERE",
    "REJECT_VALUE",
    "approval_event",
    "approval_reason",
    "interrupt_events",
    "pending_events",
    "signoff_requests",
]

APPROVE_VALUE = True
REJECT_VALUE = False
DECIDED_ELSEWHERE = "signoff:decided-elsewhere"
"""The value of the *Decided elsewhere* button: not a decision, just "resume and read the store"."""

_DESCRIPTION_LIMIT = 500


def approval_reason(
    approval: Approval, args: Mapping[str, Any], *, description: str | None = None
) -> Reason:
    """The structured reason for one approval: the question and its widgets.

    Args:
        approval: the approval (its tool, id, policy and expiry are shown).
        args: the call's arguments (shown as JSON; cut with a note if the body would pass
            Welt's 3000 characters).
        description: shown under the title; default the policy's description.
    """
    options, field = _widgets(approval)
    reason: Reason = {"message": _message(approval, args, description)}
    if options:
        reason["options"] = options
    if field is not None:
        reason["input"] = field
    return reason


def approval_event(
    approval: Approval, args: Mapping[str, Any], *, description: str | None = None
) -> InterruptEvent:
    """The `interrupt` event asking about one approval (id: the approval id; name: the tool)."""
    reason = approval_reason(approval, args, description=description)
    return interrupt_event(approval.approval_id, approval.tool, reason)


def signoff_requests(interrupt_id: str, value: Any) -> list[Mapping[str, Any]]:
    """The approval requests in one LangGraph interrupt value: create_agent's middleware asks
    one per interrupt (`tool_approval`) or all of a message at once (`action_requests`, the
    batched shape), the tool node all of a message at once (`tool_approvals`).

    Raises:
        UnsupportedInterrupt: the value is no Signoff approval request.
    """
    if isinstance(value, Mapping):
        if value.get("type") == "tool_approvals" and isinstance(value.get("requests"), list):
            requests = value["requests"]
        elif isinstance(value.get("action_requests"), list):
            requests = value["action_requests"]
        else:
            requests = [value]
        if requests and all(
            isinstance(r, Mapping) and isinstance(r.get("approval_id"), str) for r in requests
        ):
            return list(requests)
    raise UnsupportedInterrupt(interrupt_id)


async def interrupt_events(store: ApprovalStore, interrupts: Iterable[Any]) -> list[InterruptEvent]:
    """One `interrupt` event per approval the run paused for, in order, each once.

    Args:
        store: where the approvals (and their sealed arguments) are read.
        interrupts: LangGraph `Interrupt`s (from the `updates` stream's `__interrupt__`, or
            `(await graph.aget_state(config)).interrupts`).

    Raises:
        UnsupportedInterrupt: the run paused on something that is no Signoff approval.
    """
    events: list[InterruptEvent] = []
    seen: set[str] = set()
    for pause in interrupts:
        for request in signoff_requests(str(getattr(pause, "id", "?")), pause.value):
            approval_id = str(request["approval_id"])
            if approval_id in seen:
                continue
            seen.add(approval_id)
            approval = await store.get(approval_id, reveal=True)
            description = request.get("description")
            events.append(
                approval_event(
                    approval,
                    approval.args or {},
                    description=description if isinstance(description, str) else None,
                )
            )
    return events


async def pending_events(
    store: ApprovalStore, *, run_id: str | None = None, limit: int = 100
) -> list[InterruptEvent]:
    """Questions for the approvals still pending (of one run), oldest first: to ask again."""
    events: list[InterruptEvent] = []
    for pending in await store.pending(run_id=run_id, limit=limit):
        approval = await store.get(pending.approval_id, reveal=True)
        events.append(approval_event(approval, approval.args or {}))
    return events


# -- the question ---------------------------------------------------------------------------


def _widgets(approval: Approval) -> tuple[list[OptionSpec], InputSpec | None]:
    policy = approval.policy
    allowed = set(policy.allowed)
    if policy.quorum > 1:  # the store allows only approve and reject with a quorum
        allowed &= {DecisionKind.APPROVE, DecisionKind.REJECT}
    options: list[OptionSpec] = []
    if DecisionKind.APPROVE in allowed:
        options.append({"value": APPROVE_VALUE, "label": "Approve", "style": "primary"})
    if DecisionKind.REJECT in allowed:
        options.append({"value": REJECT_VALUE, "label": "Reject", "style": "danger"})
    field: InputSpec | None = None
    if DecisionKind.RESPOND in allowed:
        field = {"label": f"Answer instead of running {approval.tool}"}
    if DecisionKind.EDIT in allowed or (not options and field is None):
        options.append({"value": DECIDED_ELSEWHERE, "label": "Decided elsewhere"})
    return options, field


def _message(approval: Approval, args: Mapping[str, Any], description: str | None) -> str:
    tool, approval_id = inline_code(approval.tool), inline_code(approval.approval_id)
    text = (description or approval.policy.description or "").strip()
    if len(text) > _DESCRIPTION_LIMIT:
        text = text[: _DESCRIPTION_LIMIT - 1] + "…"
    head = [f"**Approve {tool}?**"]
    if text and text != f"Approve {approval.tool}?":
        head.append(text)
    tail = [_edit_note(approval)] if _edit_only_or_allowed(approval) else []
    if approval.policy.quorum > 1:
        approvers = sorted(approval.approvers)
        so_far = f"; approved so far by {', '.join(approvers)}" if approvers else ""
        tail.append(f"Needs {approval.policy.quorum} approvals from different people{so_far}.")
    args, hidden = without_sensitive(approval.policy.sensitive, args)
    if hidden:  # a Slack thread is no place for them: the reveal is journaled
        names = ", ".join(inline_code(h) for h in hidden)
        show = inline_code(f"signoff approvals show {approval.approval_id} --reveal")
        tail.append(f"Not shown, marked sensitive: {names} (see them with {show}).")
    footer = f"Approval {approval_id}"
    if approval.expires_at is not None:
        expires = approval.expires_at.strftime("%Y-%m-%d %H:%M UTC")
        footer += f" · denied if nobody decides by {expires}"
    tail.append(footer)
    before, after = "\n".join(head) + "\n\n", "\n\n" + "\n".join(tail)
    return before + _arguments(args, approval.approval_id, len(before) + len(after)) + after


def _edit_only_or_allowed(approval: Approval) -> bool:
    return DecisionKind.EDIT in approval.policy.allowed and approval.policy.quorum == 1


def _edit_note(approval: Approval) -> str:
    command = inline_code(
        f"signoff approvals decide {approval.approval_id} --edit '<json>' --by <you>"
    )
    if approval.policy.allowed == frozenset({DecisionKind.EDIT}):
        lead = "This call can only be decided with edited arguments, which Slack cannot carry."
    else:
        lead = "To run it with other arguments:"
    return f"{lead} Decide it outside Slack ({command}), then press *Decided elsewhere*."


def _arguments(args: Mapping[str, Any], approval_id: str, used: int) -> str:
    """The arguments as a JSON code block, cut (with a note) to fit Welt's body limit."""
    text = _readable_json(args)
    fence_open, fence_close = "```json\n", "\n```"
    room = MESSAGE_LIMIT - used - len(fence_open) - len(fence_close)
    if len(text) <= room:
        return fence_open + text + fence_close
    show = inline_code(f"signoff approvals show {approval_id} --reveal")
    note = f"\n_Arguments cut after {{}} of {len(text)} characters; see them all with {show}._"
    cut = max(0, room - len(note.format(len(text))))
    return fence_open + text[:cut] + fence_close + note.format(cut)


def _readable_json(args: Mapping[str, Any]) -> str:
    """Pretty JSON, as the model called the tool (key order kept). Characters a reader cannot
    see (format and control characters, e.g. a right-to-left override) are escaped, so the
    text shown is the text that runs. No line can open or close the code fence: JSON strings
    hold no raw newline, and every line starts with a bracket or indentation."""
    text = json.dumps(args, indent=2, ensure_ascii=False)
    return "".join(
        json.dumps(ch)[1:-1]
        if ch != "\n" and unicodedata.category(ch) in ("Cc", "Cf", "Co", "Cs", "Zl", "Zp")
        else ch
        for ch in text
    )


def inline_code(text: str) -> str:
    """`text` as inline code, whatever backticks it holds."""
    longest = run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    ticks = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"
