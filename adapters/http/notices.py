"""What a notification to reviewers says of a new approval request (Slack and e-mail say the
same): the tool, who asked in which run, until when, who decides (in plain words), whether the
tool's effect can be undone, its headline argument fields, and the link that opens it in the
inbox. Never a button or link that decides: a decision is made in the inbox or the API by an
authenticated reviewer.

Headline values are the only arguments a notification carries, and only the fields the policy
names in `headline` and not in `sensitive`; a policy with no headline sends no argument value.
Sending them is a disclosure outside Signoff, so it is recorded first, as a reviewer's reveal is
(`ledger.revealed` on `reveal:<approval id>`, signed by the service), under the notifier's name
(`notifier:slack`, `notifier:email`) and the delivery's id as its request id, so that the
retries of one delivery record it once.
"""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import quote

from adapters.runtime.documents import policy_text
from approvals import Approval, ApprovalStore, UnknownApproval
from approvals.projection import STREAM_PREFIX, approval_id_of
from ledger.audit.reveals import record_reveal
from ledger.journal.reader import event_at
from ledger.store import Database

from .deliveries import NotSent

__all__ = ["MAX_FIELDS", "MAX_VALUE_CHARS", "Notice", "approval_link", "notice_for", "shown"]

MAX_FIELDS = 20
"""Most headline fields a notification shows (the rest are in the inbox)."""
MAX_VALUE_CHARS = 500
"""Longest headline value a notification shows, in characters (then cut, with an ellipsis)."""
MAX_TEXT_CHARS = 1000
"""Longest text of anything else it shows (a tool's description, a name)."""
_BREAKS = frozenset({"Cc", "Zl", "Zp"})  # control characters, U+2028 and U+2029 break lines
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


@dataclass(frozen=True, slots=True)
class Notice:
    """One approval request, as a notification tells of it. Every text is as the database
    holds it (cut to length): each channel escapes it for its own format."""

    approval_id: str
    tool: str
    run_id: str
    requested_by: str
    requested_at: datetime
    expires_at: datetime | None
    status: str
    deciders: str
    irreversible: bool
    description: str
    fields: tuple[tuple[str, str], ...]
    link: str


def shown(value: object, limit: int = MAX_TEXT_CHARS) -> str:
    """`value` as one short text: a string as it is, anything else as compact JSON; control
    characters and line separators (every line break) and the marks that reorder text (which
    would let a tool's name show as another) as spaces; cut to `limit` characters with an
    ellipsis."""
    if isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)
    text = "".join(" " if c in _BIDI or unicodedata.category(c) in _BREAKS else c for c in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def approval_link(public_url: str, approval_id: str) -> str:
    """The inbox's page of one approval, under the service's public URL."""
    return f"{public_url}/inbox/approvals/{quote(approval_id, safe='')}"


def headline_fields(approval: Approval) -> tuple[str, ...]:
    """The argument fields a notification may carry: the headline's, never a sensitive one."""
    policy = approval.policy
    return tuple(n for n in policy.headline if n not in policy.sensitive)[:MAX_FIELDS]


async def notice_for(
    db: Database,
    store: ApprovalStore,
    position: int,
    delivery_id: int,
    *,
    public_url: str,
    notifier: str,
) -> Notice:
    """The notice of the `approval.requested` event at `position`, for delivery `delivery_id`
    by `notifier` (its name in the journal, `notifier:slack`); records the disclosure of its
    headline values first, when it carries any.

    Raises:
        NotSent: no such event or approval.
    """
    async with db.connection() as conn:
        event = await event_at(conn, position)
    if event is None or not event.stream_id.startswith(STREAM_PREFIX):
        raise NotSent(f"no approval's event at position {position}")
    approval_id = approval_id_of(event.stream_id)
    try:
        approval = await store.get(approval_id)
    except UnknownApproval:
        raise NotSent(f"no approval for the event at {position}") from None
    names = headline_fields(approval)
    values: list[tuple[str, str]] = []
    if names:
        args = (await store.get(approval_id, reveal=True)).args or {}
        present = [n for n in names if n in args]
        if present:
            await record_reveal(
                db,
                store.ring,
                f"reveal:{approval_id}",
                notifier,
                request_id=f"delivery:{delivery_id}",
                approval_id=approval_id,
                fields=",".join(present),
            )
            values = [(shown(n, 100), shown(args[n], MAX_VALUE_CHARS)) for n in present]
    return Notice(
        approval_id=approval_id,
        tool=shown(approval.tool),
        run_id=shown(approval.run_id),
        requested_by=shown(approval.requested_by),
        requested_at=approval.requested_at,
        expires_at=approval.expires_at,
        status=approval.status.value,
        deciders=shown(policy_text(approval.policy)),
        irreversible=approval.policy.irreversible,
        description=shown(approval.policy.description),
        fields=tuple(values),
        link=approval_link(public_url, approval_id),
    )
