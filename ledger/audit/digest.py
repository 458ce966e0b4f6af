"""Signed digests of the journal and the proofs behind them: the database side.

A digest commits to every event the journal's global order has reached: the Merkle tree (RFC 6962
hashing, `.merkle`) has one leaf per event in the order of `Journal.read_all` (transaction
id, position, below the horizon), and each leaf's data is the event's 32-byte chain hash. The
root, the tree size, the last position and the time are signed with the key ring's active
digest-signing key (Ed25519). The documents and the signed message are defined in
`ledger.audit.verifier`, which checks them without a database.

Why the prefix is stable: a digest reads, in one snapshot, the events of transactions below the
oldest one still running. Every transaction that commits later has a larger id, so it sorts after
them, and the first `tree_size` leaves never change unless somebody edits the table. That is what
`verify_digest` checks; `Journal.verify` checks each event's content against its hash.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from weakref import WeakKeyDictionary

import asyncpg

from ..canonical import GENESIS_HASH, format_time
from ..errors import (
    DigestError,
    DigestMismatch,
    NotInDigest,
    PublicKeyMismatch,
    PublicKeyUnrecorded,
    UnknownKey,
)
from ..journal import Event
from ..journal.reader import event_at, txid_of
from ..keys import KeyRing, Purpose
from ..keys.public import published_keys, recorded_public_keys
from ..store import Database
from ..store.batches import batches
from . import _sql as sql
from .merkle import (
    EMPTY_ROOT,
    RootBuilder,
    consistency_path,
    inclusion_path,
    leaf_hash,
    verify_consistency,
    verify_inclusion,
)
from .signing import with_checkpoint
from .tiles import TileReader
from .tree import TreeView, integrate, may_integrate, open_view
from .verifier import (
    ConsistencyProof,
    Digest,
    ExportedEvent,
    InclusionProof,
    Invalid,
    check_digest,
    digest_message,
)

__all__ = [
    "ConsistencyProof",
    "Digest",
    "DigestCheck",
    "DigestError",
    "DigestMismatch",
    "ExportedEvent",
    "InclusionProof",
    "NotInDigest",
    "export_event",
    "prove_consistency",
    "prove_inclusion",
    "recorded_signing_keys",
    "signing_keys",
    "take_digest",
    "verify_digest",
]

_PREFETCH = 10_000


@dataclass(frozen=True, slots=True)
class DigestCheck:
    """What `verify_digest` found; `problems` is empty when the digest holds."""

    digest: Digest
    leaves_found: int
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


def export_event(event: Event, prev_hash: bytes) -> ExportedEvent:
    """The audit export of `event`, given the stored hash of its stream's previous event
    (`GENESIS_HASH` for version 1). The one definition `ledger export` shares."""
    return ExportedEvent(
        position=event.position,
        txid=event.txid,
        stream_id=event.stream_id,
        version=event.version,
        type=event.type,
        actor=event.actor,
        recorded_at=format_time(event.recorded_at),
        data=event.data_json,
        hash=bytes(event.hash),
        prev_hash=bytes(prev_hash),
        tag_version=event.tag_version,
        login=event.login,
    )


def signing_keys(ring: KeyRing) -> dict[str, bytes]:
    """Every digest-signing public key of the ring (retired ones too), by key id, as
    `data_keys` holds them; `recorded_signing_keys` also checks them against the journal.

    Raises:
        PublicKeyMismatch: a key the ring unwrapped is not its private key's.
    """
    keys: dict[str, bytes] = {}
    for k in ring.all_keys():
        if k.purpose is Purpose.DIGEST_SIGNING and k.public_key is not None:
            ring.check_public(k.key_id)
            keys[k.key_id] = k.public_key
    return keys


async def recorded_signing_keys(
    ring: KeyRing, *, refused: list[str] | None = None
) -> dict[str, bytes]:
    """Every digest-signing public key, by key id, as the journal recorded it when the key was
    made: what `signoff keys export-public` hands out and `ledger verify --digest` trusts.

    With `refused`, a key that fails those checks is left out and why is added to it (a
    finding for `ledger verify`), instead of raising.

    Raises:
        PublicKeyMismatch: `data_keys` disagrees with the journal or with a private key.
        PublicKeyUnrecorded: a key whose public key the journal never recorded.
    """
    if refused is None:
        return {
            info.key_id: public
            for info, public in await published_keys(ring, Purpose.DIGEST_SIGNING)
        }
    try:
        recorded = await recorded_public_keys(ring.db, Purpose.DIGEST_SIGNING)
    except PublicKeyMismatch as e:
        refused.append(str(e))
        return {}
    keys: dict[str, bytes] = {}
    for info in ring.all_keys():
        if info.purpose is not Purpose.DIGEST_SIGNING:
            continue
        public = recorded.get(info.key_id)
        try:
            if public is None:
                raise PublicKeyUnrecorded(info.key_id)
            if info.public_key != public:
                raise PublicKeyMismatch(info.key_id, "the public key the journal recorded for it")
            ring.check_public(info.key_id)
        except (PublicKeyMismatch, PublicKeyUnrecorded, UnknownKey) as e:
            refused.append(str(e))
            continue
        keys[info.key_id] = public
    return keys


@dataclass(frozen=True, slots=True)
class _Checked:
    """A root this process recomputed from the events: the tree of `size` leaves, the last at
    `last_position`."""

    size: int
    root: bytes
    last_position: int


# Per database, the last root a digest of this process checked: the next digest recomputes only
# the events after it (its stored compact range must still fold to it). Kept in memory, where
# no login can edit it; a new process checks the whole journal once.
_checked: WeakKeyDictionary[Database, _Checked] = WeakKeyDictionary()


async def take_digest(
    db: Database, ring: KeyRing, *, progress: Callable[[int], None] | None = None
) -> Digest:
    """Sign the Merkle root of every event the journal's global order has reached;
    `progress(n)`, when given, is called as events are hashed (n more).

    The stored tree is integrated first when this login may (the owner, `signoff_reviewer`);
    otherwise, or while another integrator holds it, the events past it are hashed in memory.
    The root the stored tree gives is signed only once it is checked against the events: the
    first digest of a process recomputes it from every event, later ones from the root it
    checked before and the events since (the stored right edge at that size must fold to it).

    Raises:
        NoActiveKey: there is no active digest-signing key.
        DigestMismatch: the stored tree's root is not what the events hash to (an edited or
            missing tile or state row): nothing is signed; `ledger verify` names the tile.
    """
    async with db.connection() as conn:
        allowed = await may_integrate(conn)
    if allowed:
        await integrate(db)
    async with _snapshot(db) as conn:
        view = await open_view(conn)
        stored = await _stored_root(view)
        builder, last_position = await _recompute(conn, view.size, _checked.get(db), progress)
    root = builder.root()
    if builder.size != view.size or stored != root or last_position != view.last_position:
        raise DigestMismatch(
            f"the stored tree's root of {view.size} leaves is "
            f"{stored.hex() if stored else 'missing'} (last position {view.last_position}); "
            f"the first {builder.size} events hash to {root.hex()} (last position "
            f"{last_position}): nothing signed; `signoff ledger verify` names what changed"
        )
    _checked[db] = _Checked(view.size, root, last_position)
    size, taken_at = view.size, view.taken_at
    async with ring.sealing():
        key_id = ring.active_key_id(Purpose.DIGEST_SIGNING)
        # The same cache, no await between: `sign` uses this very key.
        _, signature = ring.sign(digest_message(size, root, last_position, taken_at, key_id))
    digest = Digest(size, root, last_position, taken_at, key_id, signature)
    return with_checkpoint(digest, ring, db.settings.log_origin)


async def _recompute(
    conn: asyncpg.Connection,
    size: int,
    checked: _Checked | None,
    progress: Callable[[int], None] | None,
) -> tuple[RootBuilder, int]:
    """The root of the first `size` leaves from the events, and the last one's position: from
    `checked` on when the stored tree still holds it, else from the first event."""
    if checked is not None and 0 < checked.size <= size:
        builder = await _resumed_at(conn, checked.size, checked.root)
        if builder is not None:
            last = await _extend(conn, builder, checked.size, checked.last_position, size, progress)
            return builder, last
    builder, last, _ = await _root(conn, size, progress)
    return builder, last


async def verify_digest(
    db: Database,
    digest: Digest,
    public_keys: Mapping[str, bytes],
    *,
    since: Digest | None = None,
    progress: Callable[[int], None] | None = None,
) -> DigestCheck:
    """Check the digest's signature and that the database still holds its first `tree_size`
    events with the same stored hashes (hence the same root), recomputed from the events, and
    that the stored tree agrees. Altered content behind an unchanged hash is
    `Journal.verify`'s to find; `signoff ledger verify --digest` runs both.

    With `since`, an earlier digest verified before: only the events after it are read. Its
    tree's compact range comes from the stored tree and must fold to its signed root, so the
    stored hashes are trusted no further than that signature; the new events are then
    recomputed on top of it. Edits before `since` are for a full check to find.
    """
    problems: list[str] = []
    for name, checked in (("", digest), ("the earlier digest: ", since)):
        if checked is None:
            continue
        try:
            check_digest(checked, public_keys)
        except Invalid as e:
            problems.append(f"{name}{e}")
    if since is not None and since.tree_size > digest.tree_size:
        problems.append(
            f"the earlier digest covers {since.tree_size} events, more than {digest.tree_size}"
        )
        return DigestCheck(digest, 0, tuple(problems))
    async with _snapshot(db) as conn:
        if since is None:
            builder, last_position, _ = await _root(conn, digest.tree_size, progress)
        else:
            resumed = await _resume(conn, since, problems)
            if resumed is None:
                return DigestCheck(digest, 0, tuple(problems))
            builder = resumed
            last_position = await _extend(
                conn, builder, since.tree_size, since.last_position, digest.tree_size, progress
            )
        try:
            stored_root = await _stored_root(await open_view(conn, digest.tree_size))
        except DigestMismatch:  # no state row, or its edge lacks a tile
            stored_root = None
    if builder.size < digest.tree_size:
        problems.append(
            f"the journal holds {builder.size} events, the digest covers {digest.tree_size}: "
            "events were deleted"
        )
    elif builder.root() != digest.root:
        problems.append(
            f"the first {digest.tree_size} events hash to root {builder.root().hex()}, the "
            f"digest says {digest.root.hex()}: events or their hashes were changed, removed or "
            "inserted"
        )
    elif last_position != digest.last_position:
        problems.append(
            f"event {digest.tree_size} is at position {last_position}, the digest says "
            f"{digest.last_position}"
        )
    elif stored_root != digest.root:
        problems.append(
            f"the stored tree's root of {digest.tree_size} leaves is "
            f"{stored_root.hex() if stored_root else 'missing'}, the events hash to the "
            "digest's: the stored tree was changed (`signoff ledger verify` names the tile)"
        )
    return DigestCheck(digest, builder.size, tuple(problems))


async def _stored_root(view: TreeView) -> bytes | None:
    try:
        return await view.read(lambda reader: reader.root())
    except DigestMismatch:
        return None


async def _resume(
    conn: asyncpg.Connection, since: Digest, problems: list[str]
) -> RootBuilder | None:
    """A root builder at the earlier digest's tree, from the stored compact range checked
    against its signed root; None (and a problem) when the stored tree does not give it."""
    builder = await _resumed_at(conn, since.tree_size, since.root, problems)
    if builder is None:
        problems.append(
            f"the stored tree does not hold the earlier digest's tree of {since.tree_size} "
            "events: the journal or the stored tree changed before it (check with --full)"
        )
    return builder


async def _resumed_at(
    conn: asyncpg.Connection, size: int, root: bytes, problems: list[str] | None = None
) -> RootBuilder | None:
    """A root builder at the tree of `size` leaves, from the stored compact range when it
    folds to `root` (so the nodes are genuine); else None (a missing tile added to
    `problems`)."""
    try:
        view = await open_view(conn, size)
        nodes = await view.read(lambda reader: reader.compact_range())
    except DigestMismatch as e:
        if problems is not None:
            problems.append(f"the earlier digest's tree: {e}")
        return None
    builder = RootBuilder.resume(size, nodes) if nodes or not size else None
    if builder is None or view.size < size or builder.root() != root:
        return None
    return builder


async def _extend(
    conn: asyncpg.Connection,
    builder: RootBuilder,
    tree_size: int,
    last_position: int,
    size: int,
    progress: Callable[[int], None] | None,
) -> int:
    """Append to `builder` (at a tree of `tree_size` leaves, the last at `last_position`) the
    leaves after it, up to `size`; return the last one's position."""
    horizon, _ = await conn.fetchrow(sql.HORIZON)
    txid = "0"
    if tree_size:
        txid = str(await txid_of(conn, last_position) or 0)
    arguments = (txid, last_position, horizon, size - tree_size)
    last = await _add_leaves(conn, builder, progress, sql.LEAVES_AFTER, *arguments)
    return last_position if last is None else last


async def prove_inclusion(db: Database, position: int, digest: Digest) -> InclusionProof:
    """The proof that the event at `position` is a leaf of the digest's tree, with the event:
    O(log n) stored hashes.

    Raises:
        NotInDigest: the digest does not cover that position.
        DigestMismatch: the database no longer matches the digest, so no proof exists.
    """
    async with _snapshot(db) as conn:
        view = await open_view(conn, digest.tree_size)
        index = await view.index_of(position) if view.size == digest.tree_size else None
        event = await event_at(conn, position) if index is not None else None
        if view.size < digest.tree_size:
            raise DigestMismatch(
                f"the journal holds {view.size} events, the digest covers {digest.tree_size}"
            )
        if index is None or event is None:
            raise NotInDigest(position, digest.tree_size)
        prev_hash: bytes | None = GENESIS_HASH
        if event.version > 1:
            prev_hash = await conn.fetchval(sql.HASH_OF, event.stream_id, event.version - 1)
        found = index

        def read(reader: TileReader) -> tuple[bytes, bytes, list[bytes]]:
            path = inclusion_path(found, reader.size, reader.subtree)
            return reader.root(), reader.leaf(found), path

        root, leaf, path = await view.read(read)
    _check_root(root, digest)
    if leaf != leaf_hash(event.hash) or not verify_inclusion(
        leaf_hash(event.hash), index, digest.tree_size, path, digest.root
    ):
        raise DigestMismatch(
            f"the stored tree's leaf {index} is not the hash of the event at position "
            f"{position}: the stored tree or the event was changed"
        )
    if prev_hash is None:
        raise DigestMismatch(
            f"version {event.version - 1} of stream {event.stream_id!r}, before the event at "
            f"position {position}, is missing"
        )
    return InclusionProof(
        digest.tree_size, digest.root, index, tuple(path), export_event(event, prev_hash)
    )


async def prove_consistency(db: Database, old: Digest, new: Digest) -> ConsistencyProof:
    """The proof that the tree of `new` extends the tree of `old`: O(log n) stored hashes.

    Raises:
        DigestError: `old` covers more events than `new`.
        DigestMismatch: the database does not match one of them.
    """
    if old.tree_size > new.tree_size:
        raise DigestError(
            f"the old digest covers {old.tree_size} events, more than the new one's "
            f"{new.tree_size}: give the older digest first"
        )
    async with _snapshot(db) as conn:
        view = await open_view(conn, new.tree_size)
        if view.size < new.tree_size:
            raise DigestMismatch(f"the journal holds {view.size} events, the digest covers more")

        def read(reader: TileReader) -> tuple[bytes, bytes, list[bytes]]:
            old_root = reader.subtree(0, old.tree_size) if old.tree_size else EMPTY_ROOT
            proof = consistency_path(old.tree_size, reader.size, reader.subtree)
            return reader.root(), old_root, proof

        root, old_root, proof = await view.read(read)
    _check_root(root, new)
    if old_root != old.root:
        raise DigestMismatch(
            f"the first {old.tree_size} events hash to {old_root.hex()}, the old digest says "
            f"{old.root.hex()}"
        )
    if not verify_consistency(old.tree_size, new.tree_size, old.root, new.root, proof):
        raise DigestMismatch("the stored tree gives no valid consistency proof: it was changed")
    return ConsistencyProof(old.tree_size, old.root, new.tree_size, new.root, tuple(proof))


async def _root(
    conn: asyncpg.Connection, size: int | None, progress: Callable[[int], None] | None = None
) -> tuple[RootBuilder, int, datetime]:
    """The root of the first `size` leaves (None: all) recomputed from the events, the last
    one's position (0 if none) and the snapshot's time; memory stays O(log n)."""
    horizon, taken_at = await conn.fetchrow(sql.HORIZON)
    builder = RootBuilder()
    last = await _add_leaves(conn, builder, progress, sql.LEAVES, horizon, size)
    return builder, last or 0, taken_at


async def _add_leaves(
    conn: asyncpg.Connection,
    builder: RootBuilder,
    progress: Callable[[int], None] | None,
    query: str,
    *args: Any,
) -> int | None:
    """Append to `builder` the leaves of the (position, hash) rows of `query`; return the last
    one's position (None: no rows)."""
    last = None
    async with batches(conn, query, *args, size=_PREFETCH) as rows_of:
        async for rows in rows_of:
            for _, hash_ in rows:
                builder.append(leaf_hash(hash_))
            last = rows[-1][0]
            if progress is not None:
                progress(len(rows))
    return last


def _check_root(root: bytes, digest: Digest) -> None:
    if root != digest.root:
        raise DigestMismatch(
            f"the first {digest.tree_size} events hash to {root.hex()}, the digest says "
            f"{digest.root.hex()}"
        )


@asynccontextmanager
async def _snapshot(db: Database) -> AsyncIterator[asyncpg.Connection]:
    """A read-only transaction with one snapshot, so the horizon and the rows agree."""
    async with (
        db.connection() as conn,
        conn.transaction(isolation="repeatable_read", readonly=True),
    ):
        yield conn
