"""What `ledger verify` checks of policy sets and of the calls and requests they judged.

- Every `policy:<version>` stream is one `policy.published` event by its publisher, whose
  content matches its hash and whose signature is the reviewer side's.
- Every `policy_decision` recorded in a `call.started` or an `approval.requested` names a
  published version by its hash and only policies of that version; a version 0 stamp (the set
  could not be read) is a denial. In enforce mode the call did what the stamp says: a denial
  never ran (its next event is `call.denied`), a required approval was consumed by the call.

A worker login can still record a false outcome for a call it judged itself (the verifier does
not hold the arguments to judge it again); it cannot name a set that was never published, nor
run a call its stamp denies without this check reporting it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ledger.audit.integrity import StreamChecker
from ledger.journal import Event
from ledger.keys import KeyRing
from ledger.keys.attest import statement_ok
from ledger.store import Database

from .model import Mode, Outcome, PolicyStamp
from .sets import PUBLISHED, policy_statement, set_hash

__all__ = ["prepare_policy_set_check", "prepare_stamp_check", "stamp_problem"]

_PUBLISHED = "SELECT data::text FROM events WHERE stream_id LIKE 'policy:%' AND version = 1"


async def prepare_policy_set_check(db: Database) -> StreamChecker:
    ring = await KeyRing.open(db, create_missing=False)

    async def check(stream_id: str, events: Sequence[Event]) -> list[str]:
        if len(events) != 1 or events[0].type != PUBLISHED:
            return ["a policy set's stream is one policy.published event"]
        event = events[0]
        data = event.data
        problems = []
        if stream_id != f"policy:{data['version']}":
            problems.append(f"it says it is version {data['version']}")
        if event.actor != data["published_by"]:
            problems.append(f"appended by {event.actor} for {data['published_by']}")
        content = set_hash(data["policies"], Mode(data["mode"]), data["timezone"], data["tools"])
        if content != data["set_hash"]:
            problems.append("its content does not match its hash")
        why = await statement_ok(ring, policy_statement(data), data.get("signature"))
        if why is not None:
            problems.append(f"{event.actor}'s policy set {why}")
        return problems

    return check


def stamp_problem(
    recorded: Any, published: Mapping[int, tuple[str, str, frozenset[str]]]
) -> str | None:
    """What is wrong with a recorded `policy_decision` (None: it names a published set as it
    was). `published`: version -> (hash, mode, policy ids)."""
    try:
        stamp = PolicyStamp.from_json(recorded)
    except (KeyError, TypeError, ValueError) as e:
        return f"its policy decision is malformed ({e!r})"
    if stamp.version == 0:
        if stamp.outcome is not Outcome.DENY or stamp.set_hash:
            return "a policy decision without a readable set that is no denial"
        return None
    known = published.get(stamp.version)
    if known is None:
        return f"its policy decision names version {stamp.version}, which was never published"
    digest, mode, ids = known
    if stamp.set_hash != digest or str(stamp.mode) != mode:
        return f"its policy decision is not what version {stamp.version} was published as"
    unknown = sorted(set(stamp.policies) - ids)
    if unknown:
        return f"its policy decision names policies version {stamp.version} lacks: {unknown}"
    return None


async def _published(db: Database) -> dict[int, tuple[str, str, frozenset[str]]]:
    async with db.connection() as conn:
        rows = await conn.fetch(_PUBLISHED)
    found = {}
    for (text,) in rows:
        data = json.loads(text)
        found[int(data["version"])] = (
            str(data["set_hash"]),
            str(data["mode"]),
            frozenset(data["policy_ids"]),
        )
    return found


async def prepare_stamp_check(db: Database) -> StreamChecker:
    """The check of `call:` and `approval:` streams' recorded policy decisions."""
    published = await _published(db)

    async def check(stream_id: str, events: Sequence[Event]) -> list[str]:
        first = events[0] if events else None
        if first is None or first.type not in ("call.started", "approval.requested"):
            return []
        recorded = first.data.get("policy_decision")
        if recorded is None:
            return []
        why = stamp_problem(recorded, published)
        if why is not None:
            return [why]
        stamp = PolicyStamp.from_json(recorded)
        if first.type != "call.started" or stamp.mode is not Mode.ENFORCE:
            return []
        following = events[1].type if len(events) > 1 else None
        if stamp.outcome is Outcome.DENY and following != "call.denied":
            return ["its policy decision denied the call, yet it was not denied"]
        unapproved = not first.data.get("approval_id") and following != "call.denied"
        if stamp.outcome is Outcome.APPROVAL and unapproved:
            return ["its policy decision required an approval, yet it ran without one"]
        return []

    return check
