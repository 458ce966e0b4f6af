"""The journal's Merkle tree as PostgreSQL stores it (`tree_tiles`, `tree_state`): integrating
new events, reading roots and proofs, and checking it against the events.

Leaves are the digests' (`.digest`): one per event in `Journal.read_all` order, leaf data the
chain hash. Integration reads only the events after the last integrated one and the right
edge's partial tiles, and writes the tiles that changed and the state in one transaction
through `signoff_tree_integrate`, which recomputes every new hash, each level from the one
below and level 0 from the events, and the root, and refuses anything else. A tree
larger than the stored one (events not integrated yet, or a login that may not integrate) is
the stored tiles plus the rest appended in memory (`TreeView`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar

import asyncpg

from ..errors import DigestMismatch
from ..journal.reader import txid_of
from ..store import Database
from . import _sql as sql
from .merkle import HASH_SIZE, leaf_hash
from .tiles import (
    TILE_WIDTH,
    MissingTile,
    TileAppender,
    TileKey,
    TileReader,
    entries_at,
    tile_path,
    tiles_of,
)

__all__ = [
    "Integration",
    "TreeCheck",
    "TreeState",
    "TreeView",
    "check_stored_tree",
    "export_tiles",
    "integrate",
    "may_integrate",
    "open_view",
]

INTEGRATE_BATCH = 100_000
_LOCK_KEY = 0x5349474E_54524545 - (1 << 63)  # "SIGNTREE": one integrator at a time
_FUNCTION = (
    "signoff_tree_integrate(bigint, bigint, text, bigint, bytea, integer[], bigint[], bytea[])"
)
_COMPARE_EVERY = 1024  # tiles compared per query while recomputing
_R = TypeVar("_R")


@dataclass(frozen=True, slots=True)
class TreeState:
    """The `tree_state` row: `size` leaves integrated, the last one at (`last_txid`,
    `last_position`) in the global order (txid '0', position 0: none), and their root."""

    size: int
    last_txid: str
    last_position: int
    root: bytes


@dataclass(frozen=True, slots=True)
class Integration:
    """What `integrate` did: `integrated` new leaves (0: the tree was up to date, or
    `skipped` because another integrator held the lock), and the tree's size after."""

    integrated: int
    tree_size: int
    skipped: bool = False


async def read_state(conn: asyncpg.Connection) -> TreeState:
    """The `tree_state` row.

    Raises:
        DigestMismatch: the row is missing (only the owner could have deleted it).
    """
    row = await conn.fetchrow(sql.STATE)
    if row is None:
        raise DigestMismatch("the stored tree's state row (tree_state) is missing")
    size, txid, position, root = row
    return TreeState(size, txid, position, bytes(root))


def _appender(size: int, edge: dict[TileKey, bytes]) -> TileAppender:
    """A `TileAppender` at the stored tree's right edge.

    Raises:
        DigestMismatch: the stored tree lacks an edge tile, or part of it.
    """
    try:
        return TileAppender(size, edge)
    except MissingTile as e:
        raise DigestMismatch(f"the stored tree lacks a tile: {e}") from e


async def fetch_tiles(conn: asyncpg.Connection, keys: set[TileKey]) -> dict[TileKey, bytes]:
    ordered = sorted(keys)
    rows = await conn.fetch(sql.TILES, [k[0] for k in ordered], [k[1] for k in ordered])
    return {(r["level"], r["index"]): bytes(r["hashes"]) for r in rows}


def edge_keys(size: int) -> set[TileKey]:
    """The right edge's partial tiles of a tree of `size` leaves."""
    keys, level = set(), 0
    while (count := entries_at(size, level)) > 0:
        if count % TILE_WIDTH:
            keys.add((level, count // TILE_WIDTH))
        level += 1
    return keys


async def may_integrate(conn: asyncpg.Connection) -> bool:
    """Whether this login may write the tree (the owner, `signoff_reviewer`)."""
    return bool(await conn.fetchval("SELECT has_function_privilege($1, 'EXECUTE')", _FUNCTION))


async def integrate(
    db: Database,
    *,
    batch_size: int = INTEGRATE_BATCH,
    wait: bool = False,
    progress: Callable[[int], None] | None = None,
) -> Integration:
    """Integrate every event below the horizon into the stored tree, `batch_size` at a time,
    each batch one transaction (a crash loses at most the batch in flight, which the next run
    redoes). With another integrator at work this one skips (`wait`: waits for it, then goes
    on from where it stopped).

    Raises:
        PermissionDenied: the login may not integrate (workers may not).
        DigestMismatch: the stored tree is not what the events hash to (its state row or a
            tile is missing, or `signoff_tree_integrate` refused what it gives).
    """
    total = 0
    while True:
        async with db.transaction() as conn:
            if wait:
                await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_KEY)
            elif not await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", _LOCK_KEY):
                state = await read_state(conn)
                return Integration(total, state.size, skipped=True)
            state = await read_state(conn)
            horizon, _ = await conn.fetchrow(sql.HORIZON)
            rows = await conn.fetch(
                sql.AFTER, state.last_txid, state.last_position, horizon, batch_size
            )
            if not rows:
                return Integration(total, state.size)
            appender = _appender(state.size, await fetch_tiles(conn, edge_keys(state.size)))
            await _append_all(appender, [hash_ for _, _, hash_ in rows])
            changed = sorted(appender.tiles().items())
            last_txid, last_position, _ = rows[-1]
            try:
                written = await conn.fetchval(
                    sql.INTEGRATE,
                    state.size,
                    appender.size,
                    last_txid,
                    last_position,
                    appender.root(),
                    [k[0] for k, _ in changed],
                    [k[1] for k, _ in changed],
                    [t for _, t in changed],
                )
            except asyncpg.InvalidParameterValueError as e:
                # What was sent came from the stored tree and the events: the stored tree
                # disagrees with the journal.
                raise DigestMismatch(f"the stored tree cannot be extended: {e}") from e
        if written:
            total += len(rows)
            if progress is not None:
                progress(len(rows))
        if len(rows) < batch_size and written:
            return Integration(total, appender.size)


_IN_A_THREAD = 5000  # leaves: more is hashing that would hold up the event loop


async def _append_all(appender: TileAppender, hashes: list[bytes]) -> None:
    """Append the leaves of these chain hashes; a big batch off the event loop, which a
    service shares with its reviewers."""

    def run() -> None:
        for hash_ in hashes:
            appender.append(leaf_hash(hash_))

    if len(hashes) > _IN_A_THREAD:
        await asyncio.to_thread(run)
    else:
        run()


@dataclass
class TreeView:
    """The tree of `size` leaves in one snapshot: the stored tiles, plus (`overlay`) the tiles
    of leaves appended in memory past the stored tree. `last_position` is the last leaf's
    position when the view was opened up to the horizon (else 0: not looked up)."""

    conn: asyncpg.Connection
    size: int
    state: TreeState
    taken_at: datetime
    last_position: int = 0
    overlay: dict[TileKey, bytes] = field(default_factory=dict)
    tail: list[int] = field(default_factory=list)  # positions of the in-memory leaves

    async def fetch(self, keys: set[TileKey]) -> dict[TileKey, bytes]:
        found = {k: self.overlay[k] for k in keys if k in self.overlay}
        missing = {k for k in keys if k not in found}
        if missing:
            found.update(await fetch_tiles(self.conn, missing))
        return found

    async def read(self, use: Callable[[TileReader], _R]) -> _R:
        """`use(reader)` over just the tiles it reads (planned first: O(log n) rows)."""
        planner = TileReader(self.size)
        use(planner)
        tiles = await self.fetch(planner.wanted)
        try:
            return use(TileReader(self.size, tiles))
        except LookupError as e:
            raise DigestMismatch(f"the stored tree lacks a tile: {e}") from e

    async def index_of(self, position: int) -> int | None:
        """The leaf index of the event at `position`, or None when it is no leaf of this tree."""
        if position in self.tail:
            index = self.state.size + self.tail.index(position)
            return index if index < self.size else None
        found = await txid_of(self.conn, position)
        if found is None or (self.state.size, self.state.last_txid) == (0, "0"):
            return None
        txid = str(found)  # as the tile queries take it
        if (found, position) > (int(self.state.last_txid), self.state.last_position):
            return None
        row = await self.conn.fetchrow(sql.TILE_OF, txid, position)
        if row is None:
            return None
        offset = await self.conn.fetchval(
            sql.OFFSET_IN_TILE, row["first_txid_text"], row["first_position"], txid, position
        )
        index = int(row["index"]) * TILE_WIDTH + int(offset)
        return index if index < self.size else None


async def open_view(
    conn: asyncpg.Connection,
    size: int | None = None,
    *,
    progress: Callable[[int], None] | None = None,
) -> TreeView:
    """The tree of the first `size` leaves (None: every event below the horizon) in `conn`'s
    snapshot, appending in memory what the stored tree lacks. Its size is less than `size`
    when the journal holds fewer events."""
    horizon, taken_at = await conn.fetchrow(sql.HORIZON)
    state = await read_state(conn)
    if size is not None and size <= state.size:
        return TreeView(conn, size, state, taken_at)
    appender = _appender(state.size, await fetch_tiles(conn, edge_keys(state.size)))
    view = TreeView(conn, state.size, state, taken_at, state.last_position)
    txid, position = state.last_txid, state.last_position
    while size is None or appender.size < size:
        want = INTEGRATE_BATCH if size is None else min(INTEGRATE_BATCH, size - appender.size)
        rows = await conn.fetch(sql.AFTER, txid, position, horizon, want)
        await _append_all(appender, [hash_ for _, _, hash_ in rows])
        view.tail.extend(pos for _, pos, _ in rows)
        if progress is not None and rows:
            progress(len(rows))
        if rows:
            txid, position, _ = rows[-1]
            view.last_position = position
        if len(rows) < want:
            break
    view.size = appender.size
    view.overlay = appender.tiles()
    return view


@dataclass(frozen=True, slots=True)
class TreeCheck:
    """What `check_stored_tree` found: `problems` is empty when every stored tile and the
    state are what the events hash to."""

    tree_size: int
    tiles: int
    problems: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems


async def check_stored_tree(
    db: Database,
    *,
    since: tuple[int, bytes, int] | None = None,
    progress: Callable[[int], None] | None = None,
) -> TreeCheck:
    """Recompute every tile and the root of the stored tree from the events and compare them
    with `tree_tiles` and `tree_state`; name each tile that differs, is missing or is extra.

    `since` (tree size, root, last position of a verified digest) resumes from there: the
    stored right edge of that tree must hash to its root (every partial tile's entries feed
    one of its compact-range nodes, so they are genuine), and only the tiles after it are
    recomputed, from the events after it.
    """
    problems: list[str] = []
    async with (
        db.connection() as conn,
        conn.transaction(isolation="repeatable_read", readonly=True),
    ):
        try:
            state = await read_state(conn)
        except DigestMismatch as e:
            return TreeCheck(0, 0, (f"stored tree: {e}",))
        horizon, _ = await conn.fetchrow(sql.HORIZON)
        start, boundary = 0, ("0", 0)
        appender = TileAppender(0, {})
        if since is not None and 0 < since[0] <= state.size:
            size, root, position = since
            edge = await fetch_tiles(conn, edge_keys(size))
            try:
                resumed = TileAppender(size, edge)
                genuine = resumed.root() == root
            except LookupError:
                genuine = False
            txid = await txid_of(conn, position)
            if not genuine or txid is None:
                problems.append(
                    f"stored tree: its first {size} leaves do not hash to the verified digest's "
                    "root: the stored tree was changed before it (check without --since-digest)"
                )
                return TreeCheck(state.size, 0, tuple(problems))
            start, boundary, appender = size, (str(txid), position), resumed
        last: tuple[str, int] = boundary
        compared = 0
        async for txid, position, hash_ in conn.cursor(
            sql.AFTER, boundary[0], boundary[1], horizon, state.size - start, prefetch=10_000
        ):
            appender.append(leaf_hash(hash_))
            last = (txid, position)
            if progress is not None and appender.size % 10_000 == 0:
                progress(10_000)
            if appender.full_held() >= _COMPARE_EVERY:
                compared += await _compare(conn, appender.take_full(), problems)
        compared += await _compare(conn, {**appender.take_full(), **appender.edge()}, problems)
        stored = await conn.fetchval(sql.STORED_COUNT)
    if appender.size < state.size:
        problems.append(
            f"the stored tree has {state.size} leaves, the journal only {appender.size} events: "
            "events were deleted"
        )
    if start == 0 and stored != compared:
        problems.append(
            f"stored tree: {stored} tiles are stored, a tree of {state.size} leaves has {compared}"
        )
    root = appender.root()
    if root != state.root:
        problems.append(
            f"stored tree: the state's root is {state.root.hex()}, the {state.size} events hash "
            f"to {root.hex()}"
        )
    if appender.size == state.size and last != (state.last_txid, state.last_position):
        problems.append(
            f"stored tree: the state's last leaf is position {state.last_position}, the "
            f"journal's leaf {state.size} is position {last[1]}"
        )
    return TreeCheck(state.size, compared, tuple(problems))


async def _compare(
    conn: asyncpg.Connection, recomputed: dict[TileKey, bytes], problems: list[str]
) -> int:
    """Compare recomputed tiles with the stored ones; return how many were compared."""
    stored = await fetch_tiles(conn, set(recomputed))
    for key in sorted(recomputed):
        mine, theirs = recomputed[key], stored.get(key)
        name = f"stored tree: tile {key[0]}/{key[1]}"
        if theirs is None:
            problems.append(f"{name} is missing")
        elif len(theirs) != len(mine):
            problems.append(f"{name} holds {len(theirs) // 32} hashes, the tree {len(mine) // 32}")
        elif mine != theirs:
            at = next(i for i in range(0, len(mine), 32) if mine[i : i + 32] != theirs[i : i + 32])
            problems.append(
                f"{name} hash {at // 32} is {theirs[at : at + 32].hex()}, the events hash to "
                f"{mine[at : at + 32].hex()}"
            )
    return len(recomputed)


async def export_tiles(
    conn: asyncpg.Connection, size: int, write: Callable[[str, bytes], None]
) -> int:
    """Hand `write(path, hashes)` every tile of the tree of `size` leaves at its tlog-tiles
    path (partial tiles `.p/<W>`), in `conn`'s snapshot; return how many."""
    view = await open_view(conn, size)
    if view.size < size:
        raise DigestMismatch(f"the journal holds {view.size} events, the digest covers {size}")
    count = 0
    batch: list[tuple[int, int, int]] = []
    for tile in [*tiles_of(size), None]:
        if tile is not None:
            batch.append(tile)
        if batch and (tile is None or len(batch) == _COMPARE_EVERY):
            found = await view.fetch({(level, index) for level, index, _ in batch})
            for level, index, width in batch:
                hashes = found.get((level, index), b"")
                if len(hashes) < width * HASH_SIZE:
                    raise DigestMismatch(f"the stored tree lacks tile {level}/{index}")
                write(tile_path(level, index, width), hashes[: width * HASH_SIZE])
                count += 1
            batch = []
    return count
