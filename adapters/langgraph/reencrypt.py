"""Moving checkpoint rows to the active checkpoint key (and plaintext rows into encryption).

`reencrypt_checkpoints` walks each table in primary-key order, a batch at a time, and rewrites
the rows whose ciphertext names another key than the active one. It is safe while workers run:

- each batch is one UPDATE statement (one short transaction) that changes a row only if it still
  holds the exact ciphertext that was read, so a row a worker rewrote meanwhile is never
  overwritten with older content; such rows are counted as skipped and looked at again;
- it repeats whole passes until one finds no row on an old key, since a worker keeps writing
  under the old key until its key ring refreshes (`SIGNOFF_KEY_REFRESH_SECONDS`);
- it is resumable: after a crash it just finds the rows still on old keys.

Nothing is ever decrypted into the database or the log: values move from one ciphertext to
another in memory, bound to the same row.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from psycopg.rows import DictRow

from ledger.errors import SignoffError
from ledger.keys import Purpose
from ledger.log import get_logger

from . import _envelope as env
from . import _sql as sql
from ._envelope import CheckpointSealer
from .checkpointer import EncryptedPostgresSaver
from .errors import UnsupportedCheckpoint

__all__ = ["KeyUsage", "ReencryptReport", "TableCounts", "key_usage", "reencrypt_checkpoints"]

log = get_logger(__name__)

TABLES = ("checkpoint_blobs", "checkpoint_writes", "checkpoints")


@dataclass
class TableCounts:
    """What a re-encryption did to one table."""

    converted: int = 0
    skipped: int = 0  # changed or deleted by someone else between read and update; retried
    failed: int = 0  # did not open (altered, moved, retired key): left as it was


@dataclass(frozen=True)
class KeyUsage:
    """How many rows of each checkpoint table are under each key id (None: plaintext)."""

    rows: dict[str, dict[str | None, int]]

    def not_under(self, key_id: str, *, plaintext: bool) -> int:
        """Rows under any other key (and plaintext rows when `plaintext`)."""
        return sum(
            n
            for keys in self.rows.values()
            for kid, n in keys.items()
            if (kid is not None and kid != key_id) or (kid is None and plaintext)
        )

    def plaintext(self) -> int:
        return sum(keys.get(None, 0) for keys in self.rows.values())


@dataclass
class ReencryptReport:
    """The outcome of `reencrypt_checkpoints`."""

    key_id: str
    tables: dict[str, TableCounts]
    passes: int
    after: KeyUsage
    failures: list[str] = field(default_factory=list)

    @property
    def left(self) -> int:
        """Rows still under another key (failures included)."""
        return self.after.not_under(self.key_id, plaintext=False)


@dataclass(frozen=True)
class _Table:
    name: str
    select: str
    update: str
    key: tuple[str, ...]  # primary key columns, in order
    old: tuple[str, ...]  # the columns an update must still find unchanged
    convert: Callable[[CheckpointSealer, DictRow], Awaitable[tuple[Any, ...]]]


async def _reseal(
    sealer: CheckpointSealer, type_tag: str | None, blob: bytes | None, parts: env.Parts
) -> tuple[str, bytes]:
    parsed = env.parse_tag(type_tag)
    if parsed is None:  # plaintext, selected only with include_plaintext
        if type_tag is None:
            raise UnsupportedCheckpoint(f"{env.describe(parts)} has no type")
        serde_type, data = type_tag, blob or b""
    else:
        serde_type, key_id = parsed
        data = await sealer.open(key_id, serde_type, blob, parts)
    key_id, sealed = sealer.seal(serde_type, data, parts)
    return env.tag(serde_type, key_id), sealed


async def _convert_blob(sealer: CheckpointSealer, row: DictRow) -> tuple[Any, ...]:
    parts = env.blob_parts(row["thread_id"], row["checkpoint_ns"], row["channel"], row["version"])
    return await _reseal(sealer, row["type"], row["blob"], parts)


async def _convert_write(sealer: CheckpointSealer, row: DictRow) -> tuple[Any, ...]:
    parts = env.write_parts(
        row["thread_id"],
        row["checkpoint_ns"],
        row["checkpoint_id"],
        row["task_id"],
        row["task_path"],
        row["idx"],
        row["channel"],
    )
    return await _reseal(sealer, row["type"], row["blob"], parts)


async def _reseal_document(
    sealer: CheckpointSealer, document: dict[str, Any], parts: env.Parts
) -> dict[str, str]:
    key_id, serde_type, sealed = env.open_envelope(document, env.describe(parts))
    data = await sealer.open(key_id, serde_type, sealed, parts)
    new_key_id, new_sealed = sealer.seal(serde_type, data, parts)
    return env.envelope(serde_type, new_key_id, new_sealed)


async def _convert_checkpoint(sealer: CheckpointSealer, row: DictRow) -> tuple[Any, ...]:
    ids = (row["thread_id"], row["checkpoint_ns"], row["checkpoint_id"])
    checkpoint: dict[str, Any] = json.loads(row["checkpoint"])
    parts = env.checkpoint_parts(*ids)
    if env.ENVELOPE in checkpoint:
        checkpoint[env.ENVELOPE] = await _reseal_document(sealer, checkpoint, parts)
    else:
        clear, sealed = env.plaintext_checkpoint_split(checkpoint, row["snapshot_channels"] or [])
        clear[env.ENVELOPE] = sealer.seal_document(sealed, parts)
        checkpoint = clear
    metadata: dict[str, Any] = json.loads(row["metadata"])
    meta_parts = env.metadata_parts(*ids)
    if env.ENVELOPE in metadata:
        metadata[env.ENVELOPE] = await _reseal_document(sealer, metadata, meta_parts)
    else:
        clear_meta = env.clear_metadata(metadata)
        clear_meta[env.ENVELOPE] = sealer.seal_document(metadata, meta_parts)
        metadata = clear_meta
    return json.dumps(checkpoint), json.dumps(metadata)


_BLOB_KEY = ("thread_id", "checkpoint_ns", "channel", "version")
_WRITE_KEY = ("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx")
_CHECKPOINT_KEY = ("thread_id", "checkpoint_ns", "checkpoint_id")
_SPECS = (
    _Table(
        "checkpoint_blobs",
        sql.SELECT_BLOBS,
        sql.UPDATE_BLOBS,
        _BLOB_KEY,
        ("type", "blob"),
        _convert_blob,
    ),
    _Table(
        "checkpoint_writes",
        sql.SELECT_WRITES,
        sql.UPDATE_WRITES,
        _WRITE_KEY,
        ("type", "blob"),
        _convert_write,
    ),
    _Table(
        "checkpoints",
        sql.SELECT_CHECKPOINTS,
        sql.UPDATE_CHECKPOINTS,
        _CHECKPOINT_KEY,
        ("checkpoint", "metadata"),
        _convert_checkpoint,
    ),
)
# Sorts before every real key: ids are never empty strings together with the lowest idx.
_START = {"checkpoint_blobs": ("",) * 4, "checkpoint_writes": ("",) * 4 + (-(2**31),)}


async def _table_pass(
    saver: EncryptedPostgresSaver,
    table: _Table,
    active: str,
    include_plaintext: bool,
    batch_size: int,
    counts: TableCounts,
    failed: dict[tuple[Any, ...], str],
    progress: Callable[[int], None] | None = None,
) -> int:
    """One walk over a table; returns how many rows it found on old keys (known failures
    aside)."""
    pending = 0
    cursor: tuple[Any, ...] = _START.get(table.name, ("",) * len(table.key))
    while True:
        params = {f"k{i}": v for i, v in enumerate(cursor)}
        params.update(active=active, plaintext=include_plaintext, limit=batch_size)
        async with saver._cursor() as cur:
            await cur.execute(table.select, params)
            rows = await cur.fetchall()
        if not rows:
            return pending
        if progress is not None:
            progress(len(rows))
        cursor = tuple(rows[-1][k] for k in table.key)
        updates: list[tuple[Any, ...]] = []
        for row in rows:
            row_key = (table.name, *(row[k] for k in table.key))
            if row_key in failed:
                continue
            pending += 1
            try:
                new = await table.convert(saver.sealer, row)
            except SignoffError as e:
                failed[row_key] = f"{type(e).__name__}: {e}"
                counts.failed += 1
                log.warning(
                    "checkpoint row not re-encrypted",
                    thread_id=row["thread_id"],
                    table=table.name,
                    error=str(e),
                )
                continue
            updates.append(tuple(row[k] for k in (*table.key, *table.old)) + new)
        if updates:
            columns = [list(column) for column in zip(*updates, strict=True)]
            async with saver._cursor() as cur:
                await cur.execute(table.update, columns)
                changed = cur.rowcount
            counts.converted += changed
            counts.skipped += len(updates) - changed
        if len(rows) < batch_size:
            return pending


async def key_usage(saver: EncryptedPostgresSaver) -> KeyUsage:
    """How many rows of each checkpoint table are under each key id (None: plaintext)."""
    usage: dict[str, dict[str | None, int]] = {name: {} for name in TABLES}
    async with saver._cursor() as cur:
        await cur.execute(sql.KEY_USAGE)
        for row in await cur.fetchall():
            usage[row["tbl"]][row["key_id"]] = int(row["n"])
    return KeyUsage(usage)


async def reencrypt_checkpoints(
    saver: EncryptedPostgresSaver,
    *,
    batch_size: int = 500,
    include_plaintext: bool = False,
    max_passes: int = 60,
    pause: float = 0.5,
    progress: Callable[[int], None] | None = None,
) -> ReencryptReport:
    """Move every checkpoint row to the active checkpoint key, while workers keep running.

    Args:
        saver: an `EncryptedPostgresSaver` (its pool and key ring are used).
        batch_size: rows per read and per UPDATE (one short transaction each).
        include_plaintext: also encrypt rows written by a plain saver (the migration path).
        max_passes: stop after this many passes even if workers still write under an old key
            (the report's `left` says how many rows are).
        pause: seconds between passes after the second, giving stale workers time to refresh.
        progress: called with the number of rows of each batch read on old keys, as it goes.

    Returns:
        Counts per table, the failures (rows that do not open, left unchanged) and the key
        usage afterwards.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    tables = {name: TableCounts() for name in TABLES}
    failed: dict[tuple[Any, ...], str] = {}
    passes = 0
    active = ""
    while passes < max_passes:
        if passes >= 2:
            await asyncio.sleep(pause)
        passes += 1
        await saver.ring.refresh()  # a rotation made a moment ago elsewhere counts
        active = saver.ring.active_key_id(Purpose.CHECKPOINT)
        pending = 0
        for spec in _SPECS:
            pending += await _table_pass(
                saver,
                spec,
                active,
                include_plaintext,
                batch_size,
                tables[spec.name],
                failed,
                progress,
            )
        log.info("checkpoint re-encryption pass", passes=passes, key_id=active, pending=pending)
        if pending == 0:
            break
    after = await key_usage(saver)
    return ReencryptReport(active, tables, passes, after, sorted(failed.values()))
