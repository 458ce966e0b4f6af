"""What `POST /v1/approvals/{id}/reveal` answers: the approval's document with what is sealed
in it opened for the caller, except the fields its policy marks sensitive unless asked for.

The document is `shapes.approval_document` with the shown arguments (also in its `hitl` and
`agent_inbox` shapes), and:

- `hidden_fields`: the sensitive fields left out (of the arguments and of an edit's), sorted;
  empty when none were;
- `context`: `{"reason", "last_user_message"}`, what led to the call as the adapter captured
  it (each null when it captured none);
- each of `reviews` with its `reason` opened (null when it gave none); the final review of an
  edit with the edited `args` (sensitive fields left out as above), of a respond with its
  `message`;
- `cancel_reason`: a cancelled approval's reason (null when it gave none, or not cancelled).

A model echoes arguments ("refunding to DE8937..."), so where sensitive fields are left
out, these texts show each of their values (a string or number of at least
`MIN_REDACTED_CHARS` characters, or one inside a list or object) as `[<field> hidden]`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from approvals import Approval, ApprovalStatus, ApprovalStore, RequestContext
from approvals.presentation import without_sensitive

from .shapes import approval_document

__all__ = ["MIN_REDACTED_CHARS", "Revealed", "revealed_document"]

MIN_REDACTED_CHARS = 4
"""Shortest sensitive value a reveal's texts hide: a shorter one cannot be told from words."""


@dataclass(frozen=True)
class Revealed:
    """A reveal's answer, and whether it shows fields the policy marks sensitive (recorded
    with the reveal)."""

    document: dict[str, Any]
    shows_sensitive: bool


async def revealed_document(
    store: ApprovalStore, approval: Approval, *, sensitive: bool
) -> Revealed:
    """The reveal's document of `approval`, read with `reveal=True`; with `sensitive`, the
    sensitive fields shown too."""
    if approval.args is None:
        raise ValueError("a reveal shows an approval read with reveal=True")
    marked = approval.policy.sensitive
    decision = approval.decision
    edited = decision.args if approval.status is ApprovalStatus.EDITED and decision else None
    args, hidden = without_sensitive(marked, approval.args)
    edited_shown, edited_hidden = without_sensitive(marked, edited or {})
    hidden = sorted({*hidden, *edited_hidden})
    if sensitive:
        args, edited_shown = approval.args, edited or {}
    secrets = {} if sensitive else _values(hidden, approval.args, edited or {})
    document = approval_document(approval, args=args)
    document["hidden_fields"] = [] if sensitive else hidden
    context = (approval.context or RequestContext()).to_json()
    document["context"] = {k: _redacted(v, secrets) for k, v in context.items()}
    reviews = document["reviews"]
    for shown, review in zip(reviews, approval.reviews, strict=True):
        shown["reason"] = _redacted(await store.reason_of(approval, review), secrets)
    if reviews and decision is not None and approval.status.final:
        if edited is not None:
            reviews[-1]["args"] = edited_shown
        if approval.status is ApprovalStatus.RESPONDED:
            reviews[-1]["message"] = _redacted(decision.message, secrets)
    document["cancel_reason"] = _redacted(await store.cancel_reason_of(approval), secrets)
    return Revealed(document, shows_sensitive=sensitive and bool(hidden))


def _values(hidden: list[str], *args: Mapping[str, Any]) -> dict[str, str]:
    """Each text a hidden field's value shows as, to the field's name; longest first, so
    that a value inside another is not left half shown."""
    found = {
        text: name
        for name in hidden
        for given in args
        if name in given
        for text in _texts(given[name])
        if len(text) >= MIN_REDACTED_CHARS
    }
    return dict(sorted(found.items(), key=lambda item: -len(item[0])))


def _texts(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield str(value)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _texts(item)
    elif isinstance(value, list):
        for item in value:
            yield from _texts(item)


def _redacted(text: str | None, secrets: Mapping[str, str]) -> str | None:
    if text is None:
        return None
    for secret, name in secrets.items():
        text = text.replace(secret, f"[{name} hidden]")
    return text
