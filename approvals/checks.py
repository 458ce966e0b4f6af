"""The lists `signoff ledger verify` works from: every projection Signoff keeps, and every check
of whole streams beyond their hash chains. A new projection (or stream check) is added here, and
only here; `tests/test_ledger_verify.py` fails when a projection is missing."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ledger.audit.integrity import LedgerReport, StreamCheck, StreamChecker, verify_ledger
from ledger.audit.reveals import REVEALED, reveal_problem
from ledger.audit.verifier import Digest
from ledger.calls.bindings import prepare_binding_check
from ledger.calls.projection import CALLS
from ledger.calls.resolution import resolution_problem
from ledger.journal import Event, Projection
from ledger.keys import KeyRing
from ledger.keys.attest import statement_ok
from ledger.store import Database

from .integrity import approval_problems, grant_statement
from .policies.checks import prepare_policy_set_check, prepare_stamp_check
from .policies.sets import POLICY_SETS
from .projection import APPROVALS
from .reviewers import REVIEWERS

__all__ = ["PROJECTIONS", "STREAM_CHECKS", "verify_all"]

PROJECTIONS: tuple[Projection[Any], ...] = (APPROVALS, CALLS, REVIEWERS, POLICY_SETS)
"""Every table folded from the journal: each is rebuilt and compared with its table."""


async def _ring(db: Database) -> KeyRing:
    """The keys the checks need: MAC keys (the KEK) and public keys; nothing is created."""
    return await KeyRing.open(db, create_missing=False)


async def _approvals(db: Database) -> StreamChecker:
    ring = await _ring(db)

    async def check(stream_id: str, events: Sequence[Event]) -> list[str]:
        # Every problem counts, an unsigned decision or a missing MAC too: whatever names a
        # person is signed by the reviewer side, and whatever a worker writes is MACed.
        return [p.message for p in await approval_problems(ring, events)]

    return check


async def _resolutions(db: Database) -> StreamChecker:
    ring = await _ring(db)

    async def check(stream_id: str, events: Sequence[Event]) -> list[str]:
        started = events[0].data if events and events[0].type == "call.started" else {}
        problems = []
        for event in events:
            if event.type != "call.resolved":
                continue
            digest = str(started.get("request_digest", ""))
            why = await resolution_problem(ring, stream_id, digest, event.data)
            if why is not None:
                problems.append(f"version {event.version}: the resolution {why}")
            if event.actor != event.data.get("by"):
                problems.append(
                    f"version {event.version}: a resolution by {event.actor} names another"
                )
        return problems

    return check


async def _reveals(db: Database) -> StreamChecker:
    ring = await _ring(db)

    async def check(stream_id: str, events: Sequence[Event]) -> list[str]:
        problems = []
        for event in events:
            if event.type != REVEALED:
                problems.append(f"version {event.version}: {event.type} is not a reveal")
            elif why := await reveal_problem(ring, stream_id, event.actor, event.data):
                problems.append(f"version {event.version}: {event.actor}'s reveal {why}")
        return problems

    return check


async def _grants(db: Database) -> StreamChecker:
    ring = await _ring(db)

    async def check(stream_id: str, events: Sequence[Event]) -> list[str]:
        problems = []
        for event in events:
            if event.type != "approval.granted" or event.version != 1:
                problems.append(f"version {event.version}: {event.type} is not a grant")
                continue
            try:
                statement = grant_statement(event.data)
            except (KeyError, TypeError, ValueError) as e:
                problems.append(f"version 1: a malformed grant: {e!r}")
                continue
            if event.actor != event.data["granted_by"]:
                problems.append(f"version 1: appended by {event.actor} for another")
            if why := await statement_ok(ring, statement, event.data.get("signature")):
                problems.append(f"version 1: {event.actor}'s grant {why}")
        return problems

    return check


STREAM_CHECKS: tuple[StreamCheck, ...] = (
    StreamCheck("decision signatures and policies", "approval:", _approvals),
    StreamCheck("signed resolutions", "call:", _resolutions),
    StreamCheck("signed grants", "grant:", _grants),
    StreamCheck("signed reveals", "reveal:", _reveals),
    StreamCheck("approvals bound to their calls", "call:", prepare_binding_check),
    StreamCheck("signed policy sets", "policy:", prepare_policy_set_check),
    StreamCheck("calls judged by published policy sets", "call:", prepare_stamp_check),
    StreamCheck("requests judged by published policy sets", "approval:", prepare_stamp_check),
)
"""Checks run over whole streams after the projections, in order."""


async def verify_all(
    db: Database,
    *,
    since: Digest | None = None,
    public_keys: Mapping[str, bytes] | None = None,
    progress: Callable[[int], None] | None = None,
) -> LedgerReport:
    """Everything an auditor relies on: hash chains, the global order, the stored Merkle tree,
    `PROJECTIONS` against a rebuild and `STREAM_CHECKS`, in that order; with `since`, a
    verified digest (its signature checked with `public_keys`), only what came after it and
    the streams that touches (`ledger.audit.resume`)."""
    return await verify_ledger(
        db,
        PROJECTIONS,
        STREAM_CHECKS,
        since=since,
        public_keys=public_keys,
        progress=progress,
    )
