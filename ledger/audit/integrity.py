"""Everything an auditor relies on, checked against the database: `signoff ledger verify`.

`verify_ledger` runs, in order:

1. the hash chains (`Journal.verify`);
2. the global order (`check_global_order`): every event's `txid` is the transaction that inserted
   it and not in the future, so `read_all`, exports and digests reach every event `read_stream`
   returns;
3. the stored Merkle tree (`check_stored_tree`): every tile and the root recomputed from the
   events, so an edited stored hash is named;
4. every projection against a rebuild from its streams (`check_projection`);
5. the stream checks (`StreamCheck`: decision signatures and policies, say), over whole streams;
6. the signing keys' public keys in `data_keys` against the journal's records (`.keycheck`).

With a digest verified before (`since`), `ledger.audit.resume` runs the same checks over only
what came after it.

The lists of projections and stream checks are the caller's (`approvals.checks` holds the ones
Signoff keeps), since the ledger knows no approvals.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..errors import ConfigurationError, KekMissing, PermissionDenied
from ..journal import Event, Journal, Projection, VerifyReport
from ..journal.projection import ProjectionCheck, check_projection
from ..journal.reader import read_streams_with_prefix
from ..store import Database
from . import _sql as sql
from .keycheck import check_signing_keys
from .tree import TreeCheck, check_stored_tree
from .verifier import Digest

__all__ = [
    "LedgerReport",
    "OrderReport",
    "OutOfOrder",
    "Resumed",
    "StreamCheck",
    "StreamChecker",
    "check_global_order",
    "order_problem",
    "verify_ledger",
]

_XID_WRAP = 1 << 32


StreamChecker = Callable[[str, Sequence[Event]], Awaitable[Sequence[str]]]
"""Checks one whole stream (its id, its events oldest first); returns its problems."""


@dataclass(frozen=True)
class StreamCheck:
    """A check of whole streams beyond their hash chains (decision signatures and policies of
    `approval:` streams, say). `prepare` loads once what the check needs (public keys,
    policies) and returns the checker `verify_ledger` calls for every stream under
    `stream_prefix`."""

    name: str
    stream_prefix: str
    prepare: Callable[[Database], Awaitable[StreamChecker]]


@dataclass(frozen=True, slots=True)
class OutOfOrder:
    """An event whose `txid` does not put it where its transaction belongs."""

    position: int
    stream_id: str
    version: int
    txid: int
    problem: str


@dataclass(frozen=True, slots=True)
class OrderReport:
    events: int
    horizon: int  # the snapshot's xmin: events below it are final in the global order
    in_flight: int  # events at or above it (their order is final once older transactions end)
    bad: tuple[OutOfOrder, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.bad


@dataclass(frozen=True, slots=True)
class StreamCheckReport:
    name: str
    streams: int
    problems: tuple[str, ...] = field(default=())
    skipped: str | None = None  # why the check did not run (no KEK to check MACs with)


@dataclass(frozen=True, slots=True)
class Resumed:
    """Where a resumed check started and what it read: `new_events` after OLD's last event,
    in `streams` streams whose `stream_events` events were read whole, `anchored` of them
    checked against OLD's root through their last event before it."""

    tree_size: int
    last_position: int
    new_events: int = 0
    streams: int = 0
    stream_events: int = 0
    anchored: int = 0
    problems: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class LedgerReport:
    """What `verify_ledger` checked; `problems` lists every finding, in the order checked."""

    chains: VerifyReport
    order: OrderReport
    projections: tuple[ProjectionCheck, ...]
    stream_checks: tuple[StreamCheckReport, ...]
    tree: TreeCheck | None = None  # the stored Merkle tree against the events
    resumed: Resumed | None = None  # where a check resumed from a verified digest
    keys: tuple[str, ...] = ()  # signing keys whose public key is not the journal's record

    @property
    def problems(self) -> list[str]:
        found = list(self.resumed.problems if self.resumed is not None else ())
        found += [
            f"hash chain: stream {b.stream_id!r} version {b.version} position {b.position}: "
            f"{b.problem}"
            for b in sorted(self.chains.bad, key=lambda b: b.position)
        ]
        found += [
            f"global order: stream {b.stream_id!r} version {b.version} position {b.position}: "
            f"{b.problem}"
            for b in self.order.bad
        ]
        found += [f"projection {p.table}: {x}" for p in self.projections for x in p.problems]
        found += [f"{c.name}: {problem}" for c in self.stream_checks for problem in c.problems]
        found += list(self.tree.problems if self.tree is not None else ())
        found += list(self.keys)
        return found

    @property
    def ok(self) -> bool:
        return not self.problems


async def check_global_order(db: Database) -> OrderReport:
    """Every event of the table is in the global order `read_all` reads: its `txid` is the id of
    the transaction that inserted it (whose low 32 bits are the row's `xmin`) and below the next
    id to be handed out (its epoch is not ahead of the server's).

    Events are appended at a transaction's top level: the append functions refuse a savepoint
    (`AppendInSavepoint`), whose id the row's `xmin` would carry and which nothing in SQL tells
    from a forged `txid`."""
    async with (
        db.connection() as conn,
        conn.transaction(isolation="repeatable_read", readonly=True),
    ):
        events, horizon, xmax = await conn.fetchrow(sql.SNAPSHOT)
        suspects = await conn.fetch(sql.SUSPECTS)
        in_flight = await conn.fetchval(
            "SELECT count(*) FROM events WHERE txid >= pg_snapshot_xmin(pg_current_snapshot())"
        )
    bad = tuple(
        OutOfOrder(r["position"], r["stream_id"], r["version"], r["txid"], order_problem(r, xmax))
        for r in suspects
    )
    return OrderReport(events, horizon, in_flight, bad)


def order_problem(row: Mapping[str, Any], xmax: int) -> str:
    txid = row["txid"]
    if txid >= xmax:
        return (
            f"txid {txid} is in the future (the next transaction id is {xmax}): read_all, "
            "exports and digests never reach it"
        )
    # The newest full id below xmax whose low 32 bits are xmin: the inserting transaction.
    inserted_by = xmax - 1 - ((xmax - 1 - row["xmin"]) % _XID_WRAP)
    return (
        f"txid {txid} is not the transaction that inserted it ({inserted_by}): it sits out of "
        "the global order"
    )


async def verify_ledger(
    db: Database,
    projections: Sequence[Projection[Any]],
    stream_checks: Sequence[StreamCheck] = (),
    *,
    since: Digest | None = None,
    public_keys: Mapping[str, bytes] | None = None,
    progress: Callable[[int], None] | None = None,
) -> LedgerReport:
    """Check the hash chains, the global order, the stored Merkle tree, each of `projections`
    against a rebuild and each of `stream_checks`, in that order (`progress(n)`: n more
    events' chains checked).

    With `since`, a digest verified before, the checks resume from it
    (`ledger.audit.resume.verify_resumed`): its signature (with `public_keys`; else it is the
    caller's to have checked), the stored tree against its root, then only the events after
    its last one and the streams they touch.

    Raises:
        ConfigurationError: the login may not read the `events` table (with its `xmin`) and
            the projections' tables, as `signoff_app` may; the auditor role's views hide the
            transaction ids this checks.
    """
    try:
        keys = await check_signing_keys(db)
        if since is not None and since.tree_size > 0:
            from .resume import verify_resumed  # it builds on this module's reports

            resumed = await verify_resumed(
                db, projections, stream_checks, since, public_keys=public_keys, progress=progress
            )
            return replace(resumed, keys=keys)
        chains = await Journal(db).verify(progress=progress)
        tree = await check_stored_tree(db)
        order = await check_global_order(db)
        checked = tuple([await check_projection(db, p) for p in projections])
        streams = tuple([await _run_stream_check(db, c) for c in stream_checks])
    except PermissionDenied as e:
        raise ConfigurationError(
            f"verifying the ledger reads the events and projection tables, and this login may "
            f"not ({e}): use a login granted signoff_app"
        ) from e
    return LedgerReport(chains, order, checked, streams, tree, keys=keys)


async def _run_stream_check(db: Database, check: StreamCheck) -> StreamCheckReport:
    try:
        checker = await check.prepare(db)
    except KekMissing as e:
        return StreamCheckReport(check.name, 0, skipped=str(e))
    problems: list[str] = []
    streams = 0
    current: list[Event] = []

    async def finish() -> None:
        nonlocal streams
        if current:
            streams += 1
            stream_id = current[0].stream_id
            try:
                found = await checker(stream_id, current)
            except (AttributeError, KeyError, TypeError, ValueError) as e:
                # Data no Signoff function writes (the database refuses it): a finding, never
                # a crash of the whole verification.
                found = [f"its events are not what Signoff writes ({type(e).__name__}: {e})"]
            problems.extend(f"{stream_id}: {p}" for p in found)

    async with db.transaction() as conn:
        async for event in read_streams_with_prefix(conn, check.stream_prefix):
            if current and current[0].stream_id != event.stream_id:
                await finish()
                current = []
            current.append(event)
    await finish()
    return StreamCheckReport(check.name, streams, tuple(problems))
