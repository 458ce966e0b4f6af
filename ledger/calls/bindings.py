"""Approvals bound to their calls, checked for `ledger verify`.

An approval allows one call: the run, tool, call id and argument digest it was asked for (its
first event, which `signoff_commit_call` compares with the call it records since the database
refused anything else). A call whose `call.started` names an approval asked for another call
(another tool, other arguments) was recorded by a database without that check, or edited
since: `binding_problem` names it, and `ledger verify` reports it as a finding.

The ledger knows an approval only as the gate hands it over: the stream it names and what the
first event of that stream says about the call it was asked for.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from ..journal import Event
from ..store import Database
from . import _sql as sql

__all__ = ["BOUND_FIELDS", "binding_problem", "prepare_binding_check"]

# What a call and the approval that allowed it must agree on: (call.started's field, the
# approval request's field).
BOUND_FIELDS = (
    ("run_id", "run_id"),
    ("call_id", "call_id"),
    ("tool", "tool"),
    ("request_digest", "args_digest"),
)


def binding_problem(started: Mapping[str, Any], asked: Mapping[str, Any] | None) -> str | None:
    """None when the call `started` (its `call.started` data) is the call its approval was
    asked for (`asked`, the data of the approval's first event; None: there is none); else
    what differs. A call without an approval has nothing to compare."""
    approval_id = started.get("approval_id")
    if approval_id is None and started.get("approval_stream") is None:
        return None
    if asked is None:
        return f"names approval {approval_id}, whose stream holds no request"
    differ = [mine for mine, theirs in BOUND_FIELDS if started.get(mine) != asked.get(theirs)]
    if not differ:
        return None
    return (
        f"runs under approval {approval_id}, which was asked for another call "
        f"({', '.join(differ)} differ: tool {asked.get('tool')!r}, not {started.get('tool')!r})"
    )


async def prepare_binding_check(
    db: Database,
) -> Callable[[str, Sequence[Event]], Awaitable[list[str]]]:
    """The `StreamCheck` checker of `call:` streams: each call that names an approval is
    compared with that approval's request, read from the journal."""

    async def check(stream_id: str, events: Sequence[Event]) -> list[str]:
        first = events[0] if events else None
        if first is None or first.type != "call.started":
            return []
        started = first.data
        stream = started.get("approval_stream")
        asked: dict[str, Any] | None = None
        if isinstance(stream, str):
            async with db.connection() as conn:
                text = await conn.fetchval(sql.APPROVAL_REQUEST, stream)
            asked = None if text is None else json.loads(text)
        why = binding_problem(started, asked)
        return [] if why is None else [f"version {first.version}: the call {why}"]

    return check
