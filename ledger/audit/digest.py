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

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from ..canonical import GENESIS_HASH, format_time
from ..errors import DigestError, DigestMismatch, NotInDigest
from ..journal import Event
from ..journal.journal import _COLUMNS
from ..keys import KeyRing, Purpose
from ..keys.public import published_keys
from ..store import Database
from .merkle import MerkleTree, RootBuilder, leaf_hash
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

_HORIZON = "SELECT pg_snapshot_xmin(pg_current_snapshot())::text, now()"
# The first $2 leaves (all of them when $2 is NULL) in the journal's global order below $1.
_LEAVES = """
SELECT position, hash FROM events
WHERE txid < $1::text::xid8
ORDER BY txid, position
LIMIT $2
"""
_EVENT = f"SELECT {_COLUMNS} FROM events WHERE position = $1"  # the columns of `Event`
_HASH_OF = "SELECT hash FROM events WHERE stream_id = $1 AND version = $2"
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


async def recorded_signing_keys(ring: KeyRing) -> dict[str, bytes]:
    """Every digest-signing public key, by key id, as the journal recorded it when the key was
    made: what `signoff keys export-public` hands out and `ledger verify --digest` trusts.

    Raises:
        PublicKeyMismatch: `data_keys` disagrees with the journal or with a private key.
        PublicKeyUnrecorded: a key made before public keys were journaled (`keys init`).
    """
    return {
        info.key_id: public for info, public in await published_keys(ring, Purpose.DIGEST_SIGNING)
    }


async def take_digest(
    db: Database, ring: KeyRing, *, progress: Callable[[int], None] | None = None
) -> Digest:
    """Sign the Merkle root of every event the journal's global order has reached;
    `progress(n)`, when given, is called as events are hashed (n more).

    Raises:
        NoActiveKey: there is no active digest-signing key.
    """
    await ring.fresh()
    async with _snapshot(db) as conn:
        builder, last_position, taken_at = await _root(conn, None, progress)
    root = builder.root()
    key_id = ring.active_key_id(Purpose.DIGEST_SIGNING)
    # The same cache, no await between: `sign` uses this very key.
    _, signature = ring.sign(digest_message(builder.size, root, last_position, taken_at, key_id))
    return Digest(builder.size, root, last_position, taken_at, key_id, signature)


async def verify_digest(
    db: Database,
    digest: Digest,
    public_keys: Mapping[str, bytes],
    *,
    progress: Callable[[int], None] | None = None,
) -> DigestCheck:
    """Check the digest's signature and that the database still holds its first `tree_size`
    events with the same stored hashes (hence the same root). Altered content behind an
    unchanged hash is `Journal.verify`'s to find; `signoff ledger verify --digest` runs both."""
    problems: list[str] = []
    try:
        check_digest(digest, public_keys)
    except Invalid as e:
        problems.append(str(e))
    async with _snapshot(db) as conn:
        builder, last_position, _ = await _root(conn, digest.tree_size, progress)
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
    return DigestCheck(digest, builder.size, tuple(problems))


async def prove_inclusion(db: Database, position: int, digest: Digest) -> InclusionProof:
    """The proof that the event at `position` is a leaf of the digest's tree, with the event.

    Raises:
        NotInDigest: the digest does not cover that position.
        DigestMismatch: the database no longer matches the digest, so no proof exists.
    """
    async with _snapshot(db) as conn:
        tree, index = await _tree(conn, digest.tree_size, want=position)
        row = await conn.fetchrow(_EVENT, position) if index is not None else None
        if index is None or row is None:
            raise NotInDigest(position, digest.tree_size)
        event = Event(*row)
        prev_hash: bytes | None = GENESIS_HASH
        if event.version > 1:
            prev_hash = await conn.fetchval(_HASH_OF, event.stream_id, event.version - 1)
    _check_root(tree, digest)
    if prev_hash is None:
        raise DigestMismatch(
            f"version {event.version - 1} of stream {event.stream_id!r}, before the event at "
            f"position {position}, is missing"
        )
    path = tuple(tree.inclusion_proof(index))
    return InclusionProof(
        digest.tree_size, digest.root, index, path, export_event(event, prev_hash)
    )


async def prove_consistency(db: Database, old: Digest, new: Digest) -> ConsistencyProof:
    """The proof that the tree of `new` extends the tree of `old`.

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
        tree, _ = await _tree(conn, new.tree_size)
    _check_root(tree, new)
    if tree.root(old.tree_size) != old.root:
        raise DigestMismatch(
            f"the first {old.tree_size} events hash to {tree.root(old.tree_size).hex()}, the "
            f"old digest says {old.root.hex()}"
        )
    proof = tuple(tree.consistency_proof(old.tree_size))
    return ConsistencyProof(old.tree_size, old.root, new.tree_size, new.root, proof)


async def _root(
    conn: asyncpg.Connection, size: int | None, progress: Callable[[int], None] | None = None
) -> tuple[RootBuilder, int, datetime]:
    """The root of the first `size` leaves (None: all), the last one's position (0 if none) and
    the snapshot's time; memory stays O(log n) however long the journal."""
    horizon, taken_at = await conn.fetchrow(_HORIZON)
    builder = RootBuilder()
    last_position = 0
    async for position, hash_ in conn.cursor(_LEAVES, horizon, size, prefetch=_PREFETCH):
        builder.append(leaf_hash(hash_))
        last_position = position
        if progress is not None and builder.size % _PREFETCH == 0:
            progress(_PREFETCH)
    if progress is not None and builder.size % _PREFETCH:
        progress(builder.size % _PREFETCH)
    return builder, last_position, taken_at


async def _tree(
    conn: asyncpg.Connection, size: int, *, want: int | None = None
) -> tuple[MerkleTree, int | None]:
    """The tree of the first `size` leaves, and the leaf index of position `want` among them."""
    horizon, _ = await conn.fetchrow(_HORIZON)
    hashes: list[bytes] = []
    index: int | None = None
    async for position, hash_ in conn.cursor(_LEAVES, horizon, size, prefetch=_PREFETCH):
        if position == want:
            index = len(hashes)
        hashes.append(leaf_hash(hash_))
    # Hashing the levels is CPU work: off the event loop, which a service shares with others.
    return await asyncio.to_thread(MerkleTree, hashes), index


def _check_root(tree: MerkleTree, digest: Digest) -> None:
    if tree.size < digest.tree_size:
        raise DigestMismatch(f"the journal holds {tree.size} events, the digest covers more")
    if tree.root() != digest.root:
        raise DigestMismatch(
            f"the first {digest.tree_size} events hash to {tree.root().hex()}, the digest says "
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
