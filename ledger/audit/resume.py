"""`signoff ledger verify --since-digest OLD`: the checks of `verify_ledger`, resumed from a
digest verified before, at a cost proportional to what came after it.

OLD is trusted no further than its signature (checked here when public keys are given). The
stored tree's right edge at OLD's size must hash to OLD's signed root (`check_stored_tree`
with `since`), and then only the events after OLD's last event in the global order (the new
events) and the streams they touch are read:

- chains: every touched stream is read whole and its chain recomputed from the stored hashes,
  as `Journal.verify` does. The last event of such a stream that OLD covers (its anchor) is
  checked against OLD's root by an inclusion proof through the stored tiles: its stored hash,
  as a leaf, must lead to the signed root. So the chain links of the new events rest on OLD's
  signature, not on the stored hashes: an edit anywhere in a touched stream before OLD either
  breaks a link or changes the anchor's hash, which the proof then refuses. (An inclusion
  proof rather than reading the anchor's level-0 tile entry: a full tile is authenticated
  only through the tiles above it up to the root, which is what the proof's path reads.)
- global order: the events after OLD's last one, and every event whose position is after
  OLD's last position (where a row inserted since, with a forged `txid` putting it under OLD's
  horizon, lands): each must be under the transaction that inserted it and not in the future.
- projections: the rows of the touched streams (`Projection.rows_of`) against the fold of
  their whole streams; stream checks (decision signatures and policies, signed resolutions):
  the touched streams under their prefix.
- the stored tree: the tiles the new events fill.

Streams no new event touched are not read: an edit to one of their projection rows, or to an
event before OLD that leaves the stored tree alone, is for the full check to find.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from ..canonical import GENESIS_HASH
from ..errors import DigestMismatch, KekMissing
from ..journal import BadEvent, Event, Fact, Projection, VerifyReport
from ..journal.journal import _check
from ..journal.projection import ProjectionCheck, check_projection_streams
from ..journal.reader import read_streams, streams_after, txid_of
from ..store import Database
from . import _sql as sql
from .integrity import (
    LedgerReport,
    OrderReport,
    OutOfOrder,
    Resumed,
    StreamCheck,
    StreamChecker,
    StreamCheckReport,
    order_problem,
)
from .merkle import inclusion_path, leaf_hash, verify_inclusion
from .tiles import TileReader
from .tree import TreeView, check_stored_tree, open_view
from .verifier import Digest, Invalid, check_digest

__all__ = ["verify_resumed"]

_BATCH = 1000  # touched streams read per query


@dataclass
class _Totals:
    bad: list[BadEvent] = field(default_factory=list)
    stream_events: int = 0
    anchored: int = 0
    projections: dict[str, tuple[int, int, list[str]]] = field(default_factory=dict)
    checks: dict[str, tuple[int, list[str]]] = field(default_factory=dict)


async def verify_resumed(
    db: Database,
    projections: Sequence[Projection[Any]],
    stream_checks: Sequence[StreamCheck],
    since: Digest,
    *,
    public_keys: Mapping[str, bytes] | None = None,
    progress: Callable[[int], None] | None = None,
) -> LedgerReport:
    """`verify_ledger`'s checks of what came after `since` (see the module's docstring); with
    `public_keys`, `since`'s signature first (nothing resumes from a digest that fails it)."""
    resumed = Resumed(since.tree_size, since.last_position)
    if public_keys is not None:
        try:
            check_digest(since, public_keys)
        except Invalid as e:
            return _refused(resumed, f"the earlier digest: {e}")
    checkers = [(c, await _prepare(db, c)) for c in stream_checks]
    totals = _Totals()
    for p in projections:
        totals.projections[p.table] = (0, 0, [])
    for check, _ in checkers:
        totals.checks[check.name] = (0, [])
    async with (
        db.connection() as conn,
        conn.transaction(isolation="repeatable_read", readonly=True),
    ):
        txid = await txid_of(conn, since.last_position)
        try:
            view = await open_view(conn, since.tree_size)
        except DigestMismatch as e:
            return _refused(resumed, f"{e}: check in full")
        if txid is None or view.state.size < since.tree_size:
            why = (
                f"no event is at position {since.last_position}: the digest is not this journal's"
                if txid is None
                else f"the stored tree holds {view.state.size} leaves, fewer than the earlier "
                f"digest's {since.tree_size}: run `signoff ledger integrate`, or check in full"
            )
            return _refused(resumed, why)
        boundary = (int(txid), since.last_position)
        touched: list[str] = []
        seen: set[str] = set()
        new_events = 0
        async for stream_id in streams_after(conn, txid, since.last_position):
            new_events += 1
            if stream_id not in seen:
                seen.add(stream_id)
                touched.append(stream_id)
        if progress is not None and new_events:
            progress(new_events)
        order = await _order(conn, str(txid), since.last_position)
        for start in range(0, len(touched), _BATCH):
            batch = sorted(touched[start : start + _BATCH])
            events = await read_streams(conn, batch)
            totals.stream_events += len(events)
            await _chains(since, view, boundary, events, totals)
            for projection in projections:
                await _project(conn, projection, events, totals)
            for check, checker in checkers:
                await _stream_check(check, checker, events, totals)
    tree = await check_stored_tree(db, since=(since.tree_size, since.root, since.last_position))
    chains = VerifyReport(new_events, len(touched), tuple(totals.bad))
    resumed = Resumed(
        since.tree_size,
        since.last_position,
        new_events,
        len(touched),
        totals.stream_events,
        totals.anchored,
    )
    checked = tuple(
        ProjectionCheck(table, rows, streams, tuple(problems))
        for table, (rows, streams, problems) in totals.projections.items()
    )
    reports = tuple(
        StreamCheckReport(check.name, 0, skipped=skipped)
        if skipped is not None
        else StreamCheckReport(
            check.name, totals.checks[check.name][0], tuple(totals.checks[check.name][1])
        )
        for check, (_, skipped) in checkers
    )
    return LedgerReport(chains, order, checked, reports, tree, resumed)


def _refused(resumed: Resumed, problem: str) -> LedgerReport:
    """A report that checked nothing, since nothing can resume from here."""
    return LedgerReport(
        VerifyReport(0, 0),
        OrderReport(0, 0, 0),
        (),
        (),
        None,
        Resumed(resumed.tree_size, resumed.last_position, problems=(problem,)),
    )


async def _prepare(db: Database, check: StreamCheck) -> tuple[StreamChecker | None, str | None]:
    try:
        return await check.prepare(db), None
    except KekMissing as e:
        return None, str(e)


async def _order(conn: asyncpg.Connection, txid: str, position: int) -> OrderReport:
    events, horizon, xmax, in_flight = await conn.fetchrow(sql.ORDER, txid, position)
    suspects = await conn.fetch(sql.RECENT_SUSPECTS, txid, position)
    bad = tuple(
        OutOfOrder(r["position"], r["stream_id"], r["version"], r["txid"], order_problem(r, xmax))
        for r in suspects
    )
    return OrderReport(events, horizon, in_flight, bad)


async def _chains(
    since: Digest,
    view: TreeView,
    boundary: tuple[int, int],
    events: Sequence[Event],
    totals: _Totals,
) -> None:
    """Recompute the chains of these whole streams, and prove each one's anchor (its last
    event at or before the boundary) a leaf of the earlier digest's tree."""
    anchors: dict[str, Event] = {}
    previous: Event | None = None
    for event in events:
        if previous is None or previous.stream_id != event.stream_id:
            previous_hash, previous_version = GENESIS_HASH, 0
        else:
            previous_hash, previous_version = previous.hash, previous.version
        problem = _check(event, previous_hash, previous_version)
        if problem is not None:
            totals.bad.append(BadEvent(event.stream_id, event.version, event.position, problem))
        if (event.txid, event.position) <= boundary:
            anchors[event.stream_id] = event
        previous = event
    placed: list[tuple[Event, int]] = []
    for anchor in anchors.values():
        index = await view.index_of(anchor.position)
        if index is None:
            totals.bad.append(_unanchored(anchor, "is no leaf of the earlier digest's tree"))
        else:
            placed.append((anchor, index))
    if not placed:
        return
    size = since.tree_size

    def paths(reader: TileReader) -> list[list[bytes]]:
        return [inclusion_path(index, size, reader.subtree) for _, index in placed]

    try:
        proofs = await view.read(paths)
    except DigestMismatch as e:  # a missing tile: no proof, so no anchor
        for anchor, _ in placed:
            totals.bad.append(_unanchored(anchor, f"has no proof in the stored tree ({e})"))
        return
    for (anchor, index), path in zip(placed, proofs, strict=True):
        if verify_inclusion(leaf_hash(anchor.hash), index, size, path, since.root):
            totals.anchored += 1
        else:
            totals.bad.append(
                _unanchored(
                    anchor,
                    f"is not leaf {index} of the earlier digest's tree: its stored hash, or an "
                    "event before it in its stream, was changed",
                )
            )


def _unanchored(event: Event, problem: str) -> BadEvent:
    return BadEvent(
        event.stream_id,
        event.version,
        event.position,
        f"the stream's last event before the earlier digest {problem}",
    )


async def _project(
    conn: asyncpg.Connection, projection: Projection[Any], events: Sequence[Event], totals: _Totals
) -> None:
    mine = [
        Fact(e.stream_id, e.version, e.type, e.data, e.actor)
        for e in events
        if e.stream_id.startswith(projection.stream_prefix)
    ]
    if not mine:
        return
    found = await check_projection_streams(conn, projection, mine)
    rows, streams, problems = totals.projections[projection.table]
    totals.projections[projection.table] = (
        rows + found.rows,
        streams + found.streams,
        [*problems, *found.problems],
    )


async def _stream_check(
    check: StreamCheck,
    prepared: tuple[StreamChecker | None, str | None],
    events: Sequence[Event],
    totals: _Totals,
) -> None:
    checker = prepared[0]
    if checker is None:
        return
    streams, problems = totals.checks[check.name]
    current: list[Event] = []
    mine = [e for e in events if e.stream_id.startswith(check.stream_prefix)]
    for at, event in enumerate(mine):
        current.append(event)
        if at + 1 == len(mine) or mine[at + 1].stream_id != event.stream_id:
            streams += 1
            problems += [f"{event.stream_id}: {p}" for p in await checker(event.stream_id, current)]
            current = []
    totals.checks[check.name] = (streams, problems)
