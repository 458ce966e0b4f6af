"""Signed reveals: who read something sealed, in clear, recorded before it is shown.

A `ledger.revealed` event (stream `reveal:<approval id>` or `reveal:<run>/<call>`) names the
person who read arguments or a result in clear, so it is signed by the reviewer side as a
decision is (`ledger.keys.attest`): over the stream id, what was revealed (`run_id` and
`call_id`, or `approval_id`), who and when. A client's `request_id` rides beside the signature,
unsigned, as it does in decisions. Only the reviewer side can make one; `reveal_problem` checks
one for `ledger verify`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from ..canonical import format_time, json_digest
from ..errors import InvalidEvent, VersionConflict
from ..journal import Journal, NewEvent
from ..keys import KeyRing
from ..keys.attest import Statement, sign_statement, statement_ok
from ..limits import name_problem
from ..store import Database

__all__ = ["REVEALED", "record_reveal", "reveal_problem", "reveal_statement"]

REVEALED = "ledger.revealed"
_UNSIGNED = ("at", "signature", "request_id")  # the rest of the data is what was revealed


def reveal_statement(stream_id: str, by: str, data: Mapping[str, Any]) -> Statement:
    """What a `ledger.revealed` event's signature covers (`data` is the event's data)."""
    what = {k: v for k, v in data.items() if k not in _UNSIGNED}
    return Statement(
        binding=json_digest(["signoff.reveal.v1", stream_id]),
        subject=stream_id,
        kind="reveal",
        payload=what,
        reviewer=by,
        groups=(),
        at=format_time(datetime.fromisoformat(data["at"])),
    )


async def reveal_problem(
    ring: KeyRing, stream_id: str, by: str, data: Mapping[str, Any]
) -> str | None:
    """None when a `ledger.revealed` event's signature verifies; else what is wrong ("unsigned"
    for one that carries none)."""
    try:
        statement = reveal_statement(stream_id, by, data)
    except (KeyError, TypeError, ValueError) as e:
        return f"a malformed reveal: {e!r}"
    return await statement_ok(ring, statement, data.get("signature"))


async def record_reveal(
    db: Database,
    ring: KeyRing,
    stream: str,
    by: str,
    *,
    request_id: str | None = None,
    **what: str | bool,
) -> bool:
    """Record in the journal, signed by the reviewer side, that `by` read something sealed, in
    clear: `what` names it (ids, and flags such as an approval reveal's `sensitive`: whether
    the fields its policy marks sensitive were shown), signed with it. Reveals of the same
    thing at once take turns: the loser of a version race appends after the winner.

    With a client's `request_id` (recorded in the event), a retry finds the reveal `by`
    recorded under it of the same `what` and records nothing new (another `what` under the
    same request id is recorded: a reveal is never left out). Only a reveal whose signature
    holds answers a retry: one planted under a guessed request id by a reviewer login without
    the signing key hides no real reading. Returns whether a reveal was recorded: False for a
    retry.

    Raises:
        InvalidEvent: a name or request id that cannot be stored.
        ReviewerKekMissing: this ring cannot sign (an agent worker's); nothing is written.
    """
    if problem := name_problem(by, 200):
        raise InvalidEvent(f"who reveals {problem}")
    if request_id is not None and (problem := name_problem(request_id, 200)):
        raise InvalidEvent(f"a request id {problem}")
    ring.require_decision_signer()
    data: dict[str, Any] = {**what, "at": datetime.now(UTC).isoformat()}
    async with ring.sealing():
        data["signature"] = sign_statement(ring, reveal_statement(stream, by, data))
    if request_id is not None:  # unsigned: it only names the client's request
        data["request_id"] = request_id
    journal = Journal(db)
    version = 0
    for _ in range(10):
        if request_id is None:
            version = await journal.stream_version(stream)
        else:  # one read: the stream tells its version and any earlier reveal of this request
            events = await journal.read_stream(stream)
            version = events[-1].version if events else 0
            for e in events:
                if (
                    e.type == REVEALED
                    and e.actor == by
                    and e.data.get("request_id") == request_id
                    and all(e.data.get(k) == v for k, v in what.items())
                    and await reveal_problem(ring, stream, by, e.data) is None
                ):
                    return False
        try:
            await journal.append(
                stream, [NewEvent(REVEALED, data, actor=by)], expected_version=version
            )
            return True
        except VersionConflict:
            continue
    raise VersionConflict(stream, version, None)
