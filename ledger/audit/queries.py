"""What auditors ask of the tool-call ledger: which calls ran, and the whole story of one.

Who approved a call is read from the call itself: its `call.started` event records the
approval it consumed, that approval's stream, and the reviewers whose decision allowed it, and
the `tool_calls` row keeps them. Audit knows nothing of how approvals are stored.

Reading a call's arguments or result in clear (`reveal`) is itself recorded in the journal
(stream `reveal:<run>/<call>`), signed by the reviewer side (`reveals`), so the audit trail
shows who looked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..calls.model import CallRecord, CallStatus, call_record
from ..calls.records import open_call_value
from ..errors import ConfigurationError, UnknownCall
from ..journal import Event, Journal
from ..keys import KeyRing
from ..store import Database
from . import _sql as sql
from .reveals import record_reveal

__all__ = [
    "CallFilter",
    "CallKey",
    "CallStory",
    "call_story",
    "call_summary",
    "find_calls",
    "policy_decision",
    "record_reveal",
    "story_summary",
]


CallKey = tuple[datetime, str, str]
"""Where a call sorts in `find_calls`: its start, run id and call id."""


def call_summary(call: CallRecord) -> dict[str, Any]:
    """A call as auditors are shown it, in every client (CLI, HTTP): digests, never values."""
    return {
        "run_id": call.run_id,
        "call_id": call.call_id,
        "tool": call.tool,
        "effect": call.effect.value,
        "status": call.status.value,
        "attempts": call.attempts,
        "approval_id": call.approval_id,
        "approved_by": list(call.approved_by),
        "args_digest": call.args_digest,
        "result_digest": call.result_digest,
        "resolved_by": call.resolved_by,
        "started_at": call.started_at.isoformat(),
        "finished_at": call.finished_at.isoformat() if call.finished_at else None,
    }


@dataclass(frozen=True)
class CallFilter:
    run_id: str | None = None
    tool: str | None = None
    status: CallStatus | None = None
    since: datetime | None = None
    until: datetime | None = None
    approved_by: str | None = None
    call_id: str | None = None
    limit: int = 1000
    after: CallKey | None = None
    """Only calls after this one in the order of `find_calls` (to read it page by page)."""


@dataclass(frozen=True)
class CallStory:
    """A call and everything recorded about it: its events, its approval's events, and (when
    revealed) its arguments and result."""

    call: CallRecord
    approved_by: tuple[str, ...]
    events: list[Event]
    approval_events: list[Event]
    args: dict[str, Any] | None = None
    result: Any = None
    replayed: bool = False  # revealed again under a request id whose reveal was recorded


def story_summary(story: CallStory, *, revealed: bool = False) -> dict[str, Any]:
    """A call's story as auditors are shown it, in every client: the call, its events and its
    approval's; with `revealed` (the story was read with `reveal_by`), its arguments and result."""
    shown: dict[str, Any] = {
        "call": call_summary(story.call),
        "policy_decision": policy_decision(story),
        "events": [_event_summary(e) for e in story.events],
        "approval_events": [_event_summary(e) for e in story.approval_events],
    }
    if revealed:
        shown |= {"args": story.args, "result": story.result}
    return shown


def policy_decision(story: CallStory) -> dict[str, Any] | None:
    """What the policy set decided of the call, as its `call.started` records it (None: no set
    judged it): the set's version and hash, mode, outcome, determining policies and reason."""
    first = story.events[0] if story.events else None
    if first is None or first.type != "call.started":
        return None
    recorded = first.data.get("policy_decision")
    return dict(recorded) if isinstance(recorded, dict) else None


def _event_summary(event: Event) -> dict[str, Any]:
    return {
        "position": event.position,
        "version": event.version,
        "type": event.type,
        "actor": event.actor,
        # Who wrote it, as the database stamped it (None: written before logins were recorded).
        "login": event.login,
        "recorded_at": event.recorded_at.isoformat(),
        "data": event.data,
    }


async def find_calls(db: Database, where: CallFilter) -> list[tuple[CallRecord, tuple[str, ...]]]:
    """Calls matching `where`, oldest first, each with the reviewers who approved it (none
    when no approval allowed it). `where.approved_by` is one reviewer's whole name."""
    async with db.connection() as conn:
        rows = await conn.fetch(
            sql.FIND,
            where.run_id,
            where.tool,
            where.status,
            where.since,
            where.until,
            where.approved_by,
            where.limit,
            where.call_id,
            *(where.after or (None, None, None)),
        )
    return [(record, record.approved_by) for record in map(call_record, rows)]


async def call_story(
    db: Database,
    run_id: str,
    call_id: str,
    *,
    reveal_by: str | None = None,
    ring: KeyRing | None = None,
    request_id: str | None = None,
) -> CallStory:
    """The whole story of one call. With `reveal_by` (and the key ring), its arguments and
    result in clear, and an event recording who revealed them: one for each client's
    `request_id` (`record_reveal`, signed by the reviewer side).

    Raises:
        UnknownCall: no such call.
        ReviewerKekMissing: revealing with a ring that cannot sign (an agent worker's).
    """
    found = await find_calls(db, CallFilter(run_id=run_id, call_id=call_id, limit=1))
    if not found:
        raise UnknownCall(run_id, call_id)
    call, approved_by = found[0]
    journal = Journal(db)
    events = await journal.read_stream(call.stream_id)
    approval_events = (
        await journal.read_stream(call.approval_stream) if call.approval_stream else []
    )
    story = CallStory(call, approved_by, events, approval_events)
    if reveal_by is None:
        return story
    if ring is None:
        raise ConfigurationError("revealing needs the key ring")
    reveal_stream = "reveal:" + call.stream_id.removeprefix("call:")
    recorded = await record_reveal(
        db, ring, reveal_stream, reveal_by, request_id=request_id, run_id=run_id, call_id=call_id
    )
    async with db.connection() as conn:
        sealed = await conn.fetchrow(sql.SEALED, run_id, call_id)
    args = json.loads(await open_call_value(ring, call.stream_id, "args", sealed["args_sealed"]))
    result = None
    if sealed["result_sealed"] is not None:
        text = await open_call_value(ring, call.stream_id, "result", sealed["result_sealed"])
        result = json.loads(text)
    return CallStory(call, approved_by, events, approval_events, args, result, not recorded)
