"""Copying a thread's checkpoint rows to another thread.

Every ciphertext is bound to its row, thread included, so rows copied in SQL do not open: each
value, write and document is opened for its source row and sealed again (under the active key)
for its copy. The serde bytes move as they are; nothing is decoded, and nothing reaches the
database or the log in clear. The clear columns are copied unchanged, so a copy of an edited row
is refused on read like its source.
"""

from __future__ import annotations

from typing import Any

from psycopg import AsyncCursor
from psycopg.rows import DictRow
from psycopg.types.json import Jsonb

from . import _envelope as env
from . import _sql as sql
from ._envelope import CheckpointSealer
from .errors import UnsupportedCheckpoint

__all__ = ["copy_thread_rows"]


_NOT_SEALED = (
    "is not encrypted: run `signoff checkpoints reencrypt --include-plaintext` before copying "
    "its thread"
)


async def copy_thread_rows(
    cur: AsyncCursor[DictRow],
    sealer: CheckpointSealer,
    source: str,
    target: str,
    statements: tuple[str, str, str],
) -> None:
    """Copy every row of thread `source` (all namespaces) to thread `target`, re-sealed, with
    `statements`: the saver's (checkpoint, blob, write) INSERTs.

    Every row is read and re-sealed before anything is written.

    Raises:
        DecryptionFailed, UnknownKey: a source row does not open.
        UnsupportedCheckpoint: a source row is not encrypted.
    """
    insert_checkpoint, insert_blob, insert_write = statements
    await cur.execute(sql.BLOBS, (source,))
    blobs = []
    for row in await cur.fetchall():
        ns, channel, version = row["checkpoint_ns"], row["channel"], row["version"]
        old = env.blob_parts(source, ns, channel, version)
        new = env.blob_parts(target, ns, channel, version)
        type_tag, sealed = await _reseal(sealer, row["type"], row["blob"], old, new)
        blobs.append((target, ns, channel, version, type_tag, sealed))

    await cur.execute(sql.WRITES, (source,))
    writes = []
    for row in await cur.fetchall():
        ns, checkpoint_id, task_id = row["checkpoint_ns"], row["checkpoint_id"], row["task_id"]
        path, idx, channel = row["task_path"], row["idx"], row["channel"]
        old = env.write_parts(source, ns, checkpoint_id, task_id, path, idx, channel)
        new = env.write_parts(target, ns, checkpoint_id, task_id, path, idx, channel)
        type_tag, sealed = await _reseal(sealer, row["type"], row["blob"], old, new)
        writes.append((target, ns, checkpoint_id, task_id, path, idx, channel, type_tag, sealed))

    await cur.execute(sql.CHECKPOINTS, (source,))
    checkpoints = []
    for row in await cur.fetchall():
        ns, checkpoint_id = row["checkpoint_ns"], row["checkpoint_id"]
        checkpoint = await _reseal_document(
            sealer,
            row["checkpoint"],
            env.checkpoint_parts(source, ns, checkpoint_id),
            env.checkpoint_parts(target, ns, checkpoint_id),
        )
        metadata = await _reseal_document(
            sealer,
            row["metadata"],
            env.metadata_parts(source, ns, checkpoint_id),
            env.metadata_parts(target, ns, checkpoint_id),
        )
        parent_id = row["parent_checkpoint_id"]
        checkpoints.append((target, ns, checkpoint_id, parent_id, checkpoint, metadata))

    if blobs:
        await cur.executemany(insert_blob, blobs)
    if writes:
        await cur.executemany(insert_write, writes)
    if checkpoints:
        rows = [(*ids, Jsonb(doc), Jsonb(meta)) for *ids, doc, meta in checkpoints]
        await cur.executemany(insert_checkpoint, rows)


async def _reseal(
    sealer: CheckpointSealer,
    type_tag: str | None,
    blob: bytes | None,
    source: env.Parts,
    target: env.Parts,
) -> tuple[str, bytes]:
    parsed = env.parse_tag(type_tag)
    if parsed is None:
        raise UnsupportedCheckpoint(f"{env.describe(source)} {_NOT_SEALED}")
    serde_type, key_id = parsed
    data = await sealer.open(key_id, serde_type, blob, source)
    async with sealer.ring.sealing():
        new_key_id, sealed = sealer.seal(serde_type, data, target)
    return env.tag(serde_type, new_key_id), sealed


async def _reseal_document(
    sealer: CheckpointSealer, document: dict[str, Any], source: env.Parts, target: env.Parts
) -> dict[str, Any]:
    if env.ENVELOPE not in document:
        raise UnsupportedCheckpoint(f"{env.describe(source)} {_NOT_SEALED}")
    key_id, serde_type, sealed = env.open_envelope(document, env.describe(source))
    data = await sealer.open(key_id, serde_type, sealed, source)
    async with sealer.ring.sealing():
        new_key_id, new_sealed = sealer.seal(serde_type, data, target)
    return {**document, env.ENVELOPE: env.envelope(serde_type, new_key_id, new_sealed)}
