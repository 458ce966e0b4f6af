"""What `ledger verify` checks of policy sets and of the calls and requests they judged.

- Every `policy:<version>` stream is one `policy.published` event by its publisher, whose
  content matches its hash and whose signature is the reviewer side's.
- Every `policy_decision` recorded in a `call.started` or an `approval.requested` names a
  published version by its hash and only policies of that version; a version 0 stamp (the set
  could not be read) is a denial. In enforce mode the call did what the stamp says: a denial
  never ran (its next event is `call.denied`), a required approval was consumed by the call.
- While a set is in force (enforce or log_only), every call carries a decision of the version
  in force when it was recorded, or of the one before it for `GRACE` after a publish.

A worker login can still record a false outcome for a call it judged itself (the verifier does
not hold the arguments to judge it again); it cannot name a set that was never published, nor
run a call its stamp denies without this check reporting it.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ledger.audit.integrity import StreamChecker
from ledger.journal import Event
from ledger.keys import KeyRing
from ledger.keys.attest import statement_ok
from ledger.store import Database

from ..model import ApprovalPolicy
from .cedar import Rules, parse_rules
from .model import Mode, Outcome, PolicyStamp
from .sets import PUBLISHED, policy_statement, set_hash

__all__ = ["prepare_policy_set_check", "prepare_stamp_check", "stamp_problem"]

_PUBLISHED = (
    "SELECT position, recorded_at, data::text FROM events"
    " WHERE stream_id LIKE 'policy:%' AND version = 1"
)
GRACE = timedelta(seconds=60)
"""How long after a publish a call may still carry the version before (it was judged before
the publish and recorded after), or none when no set was in force before."""


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


@dataclass(frozen=True)
class _Published:
    """A published set as the stamp check needs it: where and when it was published."""

    version: int
    position: int
    at: datetime
    set_hash: str
    mode: str
    policy_ids: frozenset[str]
    policies: str


async def _published(db: Database) -> list[_Published]:
    async with db.connection() as conn:
        rows = await conn.fetch(_PUBLISHED)
    found = []
    for position, at, text in rows:
        data = json.loads(text)
        found.append(
            _Published(
                int(data["version"]),
                position,
                at,
                str(data["set_hash"]),
                str(data["mode"]),
                frozenset(data["policy_ids"]),
                str(data["policies"]),
            )
        )
    return sorted(found, key=lambda s: s.position)


def _active_at(published: Sequence[_Published], position: int) -> _Published | None:
    """The set active when the event at `position` was written: the last published before."""
    before = bisect.bisect_left([s.position for s in published], position)
    return published[before - 1] if before else None


def _currency_problem(
    published: Sequence[_Published], event: Event, stamp: PolicyStamp | None, grace: timedelta
) -> str | None:
    """What is wrong with when a call was judged: with a set in force (enforce or log_only), a
    call recorded without a decision, or with one of a version replaced more than `grace`
    before it (a call judged just before a publish may still carry the version before)."""
    active = _active_at(published, event.position)
    if active is None:
        return None
    if stamp is None:
        if active.mode == "off" or event.recorded_at - active.at <= grace:
            return None
        return f"it carries no policy decision, yet version {active.version} was in force"
    if stamp.version == 0 or stamp.version == active.version:
        return None
    if stamp.version > active.version:
        return f"it was judged by version {stamp.version}, published after it"
    replaced = next(s for s in published if s.version == stamp.version + 1)
    if event.recorded_at - replaced.at <= grace:
        return None
    return (
        f"it was judged by version {stamp.version}, which version {replaced.version} replaced "
        f"{(event.recorded_at - replaced.at).total_seconds():.0f} s before"
    )


async def prepare_stamp_check(db: Database, grace: timedelta = GRACE) -> StreamChecker:
    """The check of `call:` and `approval:` streams' recorded policy decisions (`grace`: how
    long a call may carry the version before a publish)."""
    published = await _published(db)
    by_version = {s.version: (s.set_hash, s.mode, s.policy_ids) for s in published}
    texts = {s.version: s.policies for s in published}
    parsed: dict[int, Rules | None] = {}

    def rules_of(version: int) -> Rules | None:
        if version not in parsed:
            parsed[version] = parse_rules(texts[version])[0]
        return parsed[version]

    async def check(stream_id: str, events: Sequence[Event]) -> list[str]:
        first = events[0] if events else None
        if first is None or first.type not in ("call.started", "approval.requested"):
            return []
        recorded = first.data.get("policy_decision")
        if recorded is None:
            if first.type != "call.started":
                return []
            late = _currency_problem(published, first, None, grace)
            return [] if late is None else [late]
        why = stamp_problem(recorded, by_version)
        if why is not None:
            return [why]
        stamp = PolicyStamp.from_json(recorded)
        if first.type != "call.started":
            weaker = _weaker_approval(rules_of, stamp, first.data.get("policy"))
            return [] if weaker is None else [weaker]
        problems = []
        if (late := _currency_problem(published, first, stamp, grace)) is not None:
            problems.append(late)
        if stamp.mode is not Mode.ENFORCE:
            return problems
        following = events[1].type if len(events) > 1 else None
        if stamp.outcome is Outcome.DENY and following != "call.denied":
            problems.append("its policy decision denied the call, yet it was not denied")
        unapproved = not first.data.get("approval_id") and following != "call.denied"
        if stamp.outcome is Outcome.APPROVAL and unapproved:
            problems.append("its policy decision required an approval, yet it ran without one")
        return problems

    return check


# What an approval request's policy must hold as its determining rule's annotations say.
_ANNOTATED = (
    "tier",
    "allowed",
    "approvers",
    "any_reviewer",
    "quorum",
    "allow_self_approval",
    "expires_in_seconds",
)


def _weaker_approval(
    rules_of: Callable[[int], Rules | None], stamp: PolicyStamp, requested: Any
) -> str | None:
    """What the request's approval policy lacks of the one its recorded decision requires:
    the first determining `@approval` permit's annotations (fields it leaves to the tool's own
    policy are the tool's, which no event records)."""
    if stamp.outcome is not Outcome.APPROVAL or stamp.mode is not Mode.ENFORCE:
        return None
    rules = rules_of(stamp.version)
    if rules is None:
        return f"version {stamp.version} no longer parses"
    approving = [r for r in rules.by_internal.values() if r.approval and r.id in stamp.policies]
    if not approving:
        return f"its policy decision requires an approval no policy of version {stamp.version} asks"
    rule = min(approving, key=lambda r: rules.order.index(r.id))
    try:
        asked = ApprovalPolicy.from_json(requested)
        wanted = rule.approval_policy(asked).to_json()
    except (ValueError, TypeError, KeyError) as e:
        return f"its approval policy cannot be read ({e})"
    shown = asked.to_json()
    differs = [k for k in _ANNOTATED if shown.get(k) != wanted.get(k)]
    if differs:
        return f"its approval policy is not what {rule.id} asks ({', '.join(differs)})"
    return None
