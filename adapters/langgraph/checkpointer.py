"""LangGraph checkpoints in PostgreSQL, encrypted with the key ring's checkpoint key.

`EncryptedPostgresSaver` is LangGraph's `AsyncPostgresSaver` with the same tables and SQL; only
what goes into the columns changes (see `_envelope` for the layout and what stays in clear). Keys
come from the key ring, so every worker process shares them and a rotation reaches all of them
within the ring's refresh interval; each ciphertext names its key, so old rows keep opening until
`signoff checkpoints reencrypt` has moved them and the old key is retired.

It is made the ways LangGraph's is: on a connection or pool of your own
(`EncryptedPostgresSaver(conn, ring, pipe=...)`), from a connection string
(`async with EncryptedPostgresSaver.from_conn_string(url)`), or, for programs without an event
loop, `with EncryptedPostgresSaver.from_conn_string_sync(url)`; `encrypted_checkpointer(db, ring)`
opens a pool beside a Signoff `Database`. Without a `ring`, the key ring is opened from the
settings (the KEK of `SIGNOFF_KEK` / `SIGNOFF_KEK_FILE`, never from the connection string).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import (
    AbstractAsyncContextManager,
    AsyncExitStack,
    asynccontextmanager,
    contextmanager,
    suppress,
)
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.serde.base import SerializerProtocol
from psycopg import AsyncConnection, AsyncCursor, AsyncPipeline, OperationalError
from psycopg.errors import UndefinedTable
from psycopg.rows import DictRow, dict_row, tuple_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from ledger.errors import (
    DatabaseUnavailable,
    HistoryLost,
    SchemaOutOfDate,
    SignoffError,
    translate,
)
from ledger.keys import KeyRing
from ledger.log import get_logger
from ledger.store.config import host_urls, masked, normalize_url
from ledger.store.db import Database
from ledger.store.fence import HELD_PSYCOPG, IN_RECOVERY, REPORT_PSYCOPG, HistoryFence
from ledger.store.settings import Settings
from ledger.telemetry import Attr

from . import _envelope as env
from ._copy import copy_thread_rows
from ._envelope import CheckpointSealer
from ._loop_thread import held_on_loop_thread
from ._rows import RowOpener
from .errors import UnsupportedCheckpoint
from .tracing import READ_SPAN, WRITE_SPAN, WRITES_SPAN, checkpoint_span

__all__ = ["EncryptedPostgresSaver", "encrypted_checkpointer"]

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class _SerializedPut:
    """A checkpoint `aput` writes: its ids, its clear parts, and what it seals, serialized."""

    thread_id: str
    ns: str
    checkpoint_id: str
    parent_id: str | None
    clear: dict[str, Any]
    document: tuple[str, bytes]
    clear_meta: dict[str, Any]
    meta: tuple[str, bytes]
    blobs: list[tuple[str, str, tuple[str, bytes]]]


class EncryptedPostgresSaver(AsyncPostgresSaver):
    """LangGraph's `AsyncPostgresSaver`, storing every channel value, pending write, checkpoint
    and metadata encrypted under the key ring's active checkpoint key.

    Args:
        conn: a psycopg `AsyncConnection` or `AsyncConnectionPool` opened with
            `autocommit=True, row_factory=dict_row` (as for LangGraph's saver).
        ring: the key ring whose checkpoint keys encrypt and decrypt.
        pipe: an `AsyncPipeline` of `conn` (a single connection, not a pool), as LangGraph's
            saver takes it: statements are sent in pipeline mode and synced after each write.
        allow_plaintext: also read rows Signoff did not encrypt (written by a plain saver): the
            migration path, see `signoff checkpoints reencrypt --include-plaintext`.
        serde: the serializer under the encryption (LangGraph's default).

    Reading a row raises `DecryptionFailed` (altered or moved rows, naming the row),
    `UnknownKey` (retired or unknown key) or `PlaintextCheckpoint` (not encrypted).

    The sync methods (`get_tuple`, `put`, `put_writes`, `list`, ...) are LangGraph's: they run
    the async ones on the loop the saver was made on, from any other thread (`graph.invoke` in
    `asyncio.to_thread`); `from_conn_string_sync` gives plain sync code a saver on a loop of
    its own.
    """

    def __init__(
        self,
        conn: AsyncConnection[DictRow] | AsyncConnectionPool[AsyncConnection[DictRow]],
        ring: KeyRing,
        *,
        pipe: AsyncPipeline | None = None,
        allow_plaintext: bool = False,
        serde: SerializerProtocol | None = None,
        list_page_size: int = 100,
        fence: HistoryFence | None = None,
    ) -> None:
        super().__init__(conn, pipe=pipe, serde=serde)
        self.ring = ring
        self._fence = fence
        self.sealer = CheckpointSealer(ring, self.serde)
        self._rows = RowOpener(self.sealer, self.serde, allow_plaintext)
        self._list_page_size = list_page_size

    @asynccontextmanager
    async def _cursor(self, *, pipeline: bool = False) -> AsyncIterator[AsyncCursor[DictRow]]:
        """LangGraph's cursor, with a lost connection typed as everywhere else in Signoff:
        `DatabaseUnavailable` (a failover, a restart, a pool that found no server in time),
        never psycopg's own error. With a `fence` (`encrypted_checkpointer`), nothing is
        written to or read from a database that lost what this process saw committed."""
        if self._fence is not None:
            self._fence.refuse_if_lost()
        try:
            async with super()._cursor(pipeline=pipeline) as cur:
                if self._fence is not None:  # a new connection may have found it lost
                    self._fence.refuse_if_lost()
                yield cur
        except OperationalError as e:
            if (typed := _lost(e, self.conn)) is None:
                raise
            raise typed from e

    @property
    def allow_plaintext(self) -> bool:
        """Whether rows Signoff did not encrypt are read (see the class's Args)."""
        return self._rows.allow_plaintext

    @allow_plaintext.setter
    def allow_plaintext(self, allow: bool) -> None:
        self._rows.allow_plaintext = allow

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls,
        conn_string: str,
        *,
        pipeline: bool = False,
        serde: SerializerProtocol | None = None,
        ring: KeyRing | None = None,
        settings: Settings | None = None,
        allow_plaintext: bool = False,
    ) -> AsyncIterator[EncryptedPostgresSaver]:
        """A saver on one connection to `conn_string`, as LangGraph's `from_conn_string` makes
        it (autocommit, dict rows, no prepared statements; `pipeline`: in pipeline mode), with
        the checkpoint tables checked (`setup()`).

        Args:
            conn_string: the database's `postgresql://` URL. It carries no key: the KEK comes
                from `ring` or `settings`.
            pipeline: run the connection in pipeline mode (LangGraph's `pipe=`).
            serde: the serializer under the encryption (LangGraph's default).
            ring: the key ring to use. Without one, a ring is opened (and closed at the end) on
                a small Signoff `Database` pool to `conn_string`, with `settings` (default: the
                environment's, so the KEK of `SIGNOFF_KEK` / `SIGNOFF_KEK_FILE`).
            settings: the settings that ring is opened with (only without `ring`).
            allow_plaintext: read rows not encrypted by Signoff (migration only).

        Raises:
            SchemaOutOfDate: the checkpoint tables are missing or older than this
                langgraph-checkpoint-postgres needs.
            KekMissing, KekMismatch, NoActiveKey: opening the key ring failed.
        """
        async with AsyncExitStack() as stack:
            if ring is None:
                db = await Database.connect(conn_string, pool_size=2, settings=settings)
                stack.push_async_callback(db.close)
                ring = await KeyRing.open(db)
            conn = await AsyncConnection.connect(
                conn_string,
                autocommit=True,
                prepare_threshold=0,
                row_factory=dict_row,
                **_per_host(conn_string, ring.db.settings),
            )
            await stack.enter_async_context(conn)
            pipe = await stack.enter_async_context(conn.pipeline()) if pipeline else None
            saver = cls(conn, ring, pipe=pipe, serde=serde, allow_plaintext=allow_plaintext)
            await saver.setup()
            yield saver

    @classmethod
    @contextmanager
    def from_conn_string_sync(
        cls,
        conn_string: str,
        *,
        pipeline: bool = False,
        serde: SerializerProtocol | None = None,
        settings: Settings | None = None,
        allow_plaintext: bool = False,
    ) -> Iterator[EncryptedPostgresSaver]:
        """`from_conn_string` for code without an event loop (LangGraph's sync
        `PostgresSaver.from_conn_string`): the saver, its connection and its key ring live on
        an event loop in a thread of their own while the `with` block runs, and its sync
        methods work from any other thread (so `graph.invoke`, `graph.get_state`, ...).

        The key ring is opened from `settings` (default: the environment's); a ring made on
        another loop cannot be shared, since its database pool belongs to that loop. The
        saver's async methods run only on its own loop (`saver.loop`).
        """

        def open_saver() -> AbstractAsyncContextManager[EncryptedPostgresSaver]:
            return cls.from_conn_string(
                conn_string,
                pipeline=pipeline,
                serde=serde,
                settings=settings,
                allow_plaintext=allow_plaintext,
            )

        with held_on_loop_thread(open_saver, name="signoff-checkpoints") as saver:
            yield saver

    async def setup(self) -> None:
        """Check that the checkpoint tables are at the version this langgraph-checkpoint-postgres
        needs. Unlike LangGraph's `setup()` it creates nothing: Signoff's migration made the
        tables, so a worker login (which may not create tables) can call it too.

        Raises:
            SchemaOutOfDate: the tables are missing or older (`signoff db upgrade`).
        """
        row: DictRow | None = None
        with suppress(UndefinedTable):  # no tables at all: refused below like old ones
            async with self._cursor() as cur:
                await cur.execute("SELECT max(v) AS v FROM checkpoint_migrations")
                row = await cur.fetchone()
        _require_tables(row["v"] if row is not None else None)

    # -- writing -----------------------------------------------------------------------------

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Save a checkpoint, its new channel values and its metadata, encrypted."""
        with checkpoint_span(WRITE_SPAN, config):
            # Serializing in a thread keeps a large state from blocking the event loop, as
            # LangGraph's saver does for its blobs. Sealing runs here, on the loop: in the thread,
            # each of its calls that let go of the GIL (the cipher, the nonce from the OS) waited
            # for the loop to give it back, so a checkpoint's seals took 150 us instead of 20.
            serialized = await asyncio.to_thread(
                self._serialize_put, config, checkpoint, metadata, new_versions
            )
            async with self.ring.sealing():
                row, rows = self._seal_put(serialized)
            async with self._cursor(pipeline=True) as cur:
                if rows:
                    await cur.executemany(self.UPSERT_CHECKPOINT_BLOBS_SQL, rows)
                await cur.execute(self.UPSERT_CHECKPOINTS_SQL, row)
            return {
                "configurable": {
                    "thread_id": config["configurable"]["thread_id"],
                    "checkpoint_ns": serialized.ns,
                    "checkpoint_id": serialized.checkpoint_id,
                }
            }

    def _serialize_put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> _SerializedPut:
        """What `aput` seals and writes, serialized but not yet sealed."""
        configurable = config["configurable"]
        clear, secret, blob_values = env.split_checkpoint(checkpoint)
        # LangGraph merges `configurable` and `metadata` into this (user ids and the like).
        meta = get_serializable_checkpoint_metadata(config, metadata)
        return _SerializedPut(
            thread_id=str(configurable["thread_id"]),
            ns=str(configurable.get("checkpoint_ns", "")),
            checkpoint_id=checkpoint["id"],
            parent_id=configurable.get("checkpoint_id"),
            clear=clear,
            document=self.serde.dumps_typed(secret),
            clear_meta=env.clear_metadata(meta),
            meta=self.serde.dumps_typed(meta),
            blobs=self._serialize_blobs(blob_values, new_versions),
        )

    def _serialize_blobs(
        self, values: dict[str, Any], versions: ChannelVersions
    ) -> list[tuple[str, str, tuple[str, bytes]]]:
        """(channel, version, serialized value) of each new version that has a value
        (LangGraph's unsealed "empty" row is never written by this saver)."""
        return [
            (channel, str(version), self.serde.dumps_typed(values[channel]))
            for channel, version in versions.items()
            if channel in values
        ]

    def _seal_put(
        self, put: _SerializedPut
    ) -> tuple[tuple[Any, ...], list[tuple[str, str, str, str, str, bytes | None]]]:
        """The checkpoint row and the blob rows of `aput`, sealed."""
        parts = env.checkpoint_parts(put.thread_id, put.ns, put.checkpoint_id)
        clear = {**put.clear, env.ENVELOPE: self.sealer.envelope_of(put.document, parts)}
        meta_parts = env.metadata_parts(put.thread_id, put.ns, put.checkpoint_id)
        clear_meta = {**put.clear_meta, env.ENVELOPE: self.sealer.envelope_of(put.meta, meta_parts)}
        rows = self._seal_blobs(put.thread_id, put.ns, put.blobs)
        row = (put.thread_id, put.ns, put.checkpoint_id, put.parent_id)
        return (*row, Jsonb(clear), Jsonb(clear_meta)), rows

    def _seal_blobs(
        self, thread_id: str, ns: str, blobs: list[tuple[str, str, tuple[str, bytes]]]
    ) -> list[tuple[str, str, str, str, str, bytes | None]]:
        rows: list[tuple[str, str, str, str, str, bytes | None]] = []
        for channel, version, typed in blobs:
            parts = env.blob_parts(thread_id, ns, channel, version)
            type_tag, sealed = self.sealer.seal_typed(typed, parts)
            rows.append((thread_id, ns, channel, version, type_tag, sealed))
        return rows

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Save a task's pending writes, encrypted (serialized in a thread, sealed on the loop,
        as `aput` does; the statement is LangGraph's)."""
        query = (
            self.UPSERT_CHECKPOINT_WRITES_SQL
            if all(w[0] in WRITES_IDX_MAP for w in writes)
            else self.INSERT_CHECKPOINT_WRITES_SQL
        )
        with checkpoint_span(WRITES_SPAN, config):
            serialized = await asyncio.to_thread(self._serialize_writes, writes)
            configurable = config["configurable"]
            place = itemgetter("thread_id", "checkpoint_ns", "checkpoint_id")(configurable)
            async with self.ring.sealing():
                rows = self._seal_writes((*place, task_id, task_path), serialized)
            async with self._cursor(pipeline=True) as cur:
                await cur.executemany(query, rows)

    def _serialize_writes(
        self, writes: Sequence[tuple[str, Any]]
    ) -> list[tuple[str, tuple[str, bytes]]]:
        return [(channel, self.serde.dumps_typed(value)) for channel, value in writes]

    def _seal_writes(
        self, task: tuple[str, str, str, str, str], writes: list[tuple[str, tuple[str, bytes]]]
    ) -> list[tuple[str, str, str, str, str, int, str, str, bytes]]:
        """The rows of a task's serialized writes, sealed; `task` is (thread id, namespace,
        checkpoint id, task id, task path)."""
        thread_id, checkpoint_ns, checkpoint_id, task_id, task_path = task
        rows: list[tuple[str, str, str, str, str, int, str, str, bytes]] = []
        for i, (channel, typed) in enumerate(writes):
            idx = WRITES_IDX_MAP.get(channel, i)
            parts = env.write_parts(
                str(thread_id), checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel
            )
            type_tag, sealed = self.sealer.seal_typed(typed, parts)
            row = (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel)
            rows.append((*row, type_tag, sealed))
        return rows

    # LangGraph's own helpers, sealed too, for any of its code that calls them.
    def _dump_blobs(
        self,
        thread_id: str,
        checkpoint_ns: str,
        values: dict[str, Any],
        versions: ChannelVersions,
    ) -> list[tuple[str, str, str, str, str, bytes | None]]:
        blobs = self._serialize_blobs(values, versions)
        return self._seal_blobs(thread_id, checkpoint_ns, blobs)

    def _dump_writes(
        self,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        task_id: str,
        task_path: str,
        writes: Sequence[tuple[str, Any]],
    ) -> list[tuple[str, str, str, str, str, int, str, str, bytes]]:
        task = (thread_id, checkpoint_ns, checkpoint_id, task_id, task_path)
        return self._seal_writes(task, self._serialize_writes(writes))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint, channel value and pending write of a thread (all namespaces)
        to another thread, in one transaction, re-encrypted for it: rows are sealed to their
        thread, so a copy made in SQL would not open.

        Raises:
            DecryptionFailed, UnknownKey: a row of the source does not open.
            UnsupportedCheckpoint: the source has rows Signoff did not encrypt (convert them
                with `signoff checkpoints reencrypt --include-plaintext` first).
        """
        statements = (
            self.UPSERT_CHECKPOINTS_SQL,
            self.UPSERT_CHECKPOINT_BLOBS_SQL,
            self.INSERT_CHECKPOINT_WRITES_SQL,
        )
        async with self._cursor() as cur:
            if self.pipe:
                await self.pipe.sync()  # the transaction must not take in earlier statements
            async with cur.connection.transaction():
                await copy_thread_rows(
                    cur, self.sealer, str(source_thread_id), str(target_thread_id), statements
                )

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """`acopy_thread` from sync code: from any thread but the saver's loop's, like
        LangGraph's other sync methods."""
        try:
            on_own_loop = asyncio.get_running_loop() is self.loop
        except RuntimeError:
            on_own_loop = False
        if on_own_loop:
            raise asyncio.InvalidStateError(
                "Synchronous calls to EncryptedPostgresSaver are only allowed from a different "
                "thread. From the main thread, use `await checkpointer.acopy_thread(...)`."
            )
        asyncio.run_coroutine_threadsafe(
            self.acopy_thread(source_thread_id, target_thread_id), self.loop
        ).result()

    # -- reading -----------------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """A checkpoint (the latest of its thread unless the config names one), decrypted."""
        with checkpoint_span(READ_SPAN, config) as current:
            found = await super().aget_tuple(config)
            if current.is_recording():
                current.set_attribute(Attr.CHECKPOINT_FOUND, found is not None)
            return found

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """List checkpoints, newest first; filters on sealed metadata keys match after
        decryption (SQL still narrows by the clear keys)."""
        clear = {k: v for k, v in (filter or {}).items() if k in env.CLEAR_METADATA_KEYS}
        sealed = {k: v for k, v in (filter or {}).items() if k not in env.CLEAR_METADATA_KEYS}
        if not sealed:
            async for item in super().alist(
                config, filter=clear or None, before=before, limit=limit
            ):
                yield item
            return
        found, cursor = 0, before
        while limit is None or found < limit:
            page = [
                item
                async for item in super().alist(
                    config, filter=clear or None, before=cursor, limit=self._list_page_size
                )
            ]
            for item in page:
                if env.contains(item.metadata, sealed):
                    yield item
                    found += 1
                    if limit is not None and found >= limit:
                        return
            if len(page) < self._list_page_size:
                return
            cursor = {
                "configurable": {"checkpoint_id": page[-1].config["configurable"]["checkpoint_id"]}
            }

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> dict[str, DeltaChannelHistory]:
        """`DeltaChannel` history by walking parent checkpoints through `aget_tuple`, with the
        results of LangGraph's Postgres fast path: each channel's writes, oldest first, back to
        the nearest ancestor holding a value for it (its `seed`).

        That fast path reads inline values from clear JSONB and decodes blobs without their row
        identity, so it cannot work on sealed rows. Like it, a stored `None` is no seed (in its
        JSONB a null reads as no value): the walk goes on past it.
        """
        if not channels:
            return {}
        remaining = set(channels)
        collected: dict[str, list[PendingWrite]] = {ch: [] for ch in channels}
        seeds: dict[str, Any] = {}
        target = await self.aget_tuple(config)
        cursor = target.parent_config if target is not None else None
        while cursor is not None and remaining:
            ancestor = await self.aget_tuple(cursor)
            if ancestor is None:
                break
            for write in reversed(ancestor.pending_writes or []):
                if write[1] in remaining:
                    collected[write[1]].append(write)
            values = ancestor.checkpoint["channel_values"]
            for ch in list(remaining):
                if values.get(ch) is not None:
                    seeds[ch] = values[ch]
                    remaining.discard(ch)
            cursor = ancestor.parent_config
        history: dict[str, DeltaChannelHistory] = {}
        for ch in channels:
            entry: DeltaChannelHistory = {"writes": collected[ch][::-1]}
            if ch in seeds:
                entry["seed"] = seeds[ch]
            history[ch] = entry
        return history

    async def _load_checkpoint_tuple(self, value: DictRow) -> CheckpointTuple:
        return await self._rows.checkpoint_tuple(value)

    # Base helpers that decode database bytes without knowing their row: they cannot open
    # sealed values, so they refuse instead of being reached by some future code path.
    def _load_blobs(self, blob_values: list[tuple[bytes, bytes, bytes]]) -> dict[str, Any]:
        raise UnsupportedCheckpoint("_load_blobs cannot open sealed blobs (no row identity)")

    def _load_writes(
        self, writes: list[tuple[bytes, bytes, bytes, bytes, bytes, bytes]] | None
    ) -> list[tuple[str, str, Any]]:
        raise UnsupportedCheckpoint("_load_writes cannot open sealed writes (no row identity)")

    def _migrate_pending_sends(
        self,
        pending_sends: list[tuple[bytes, bytes]],
        checkpoint: dict[str, Any],
        channel_values: list[tuple[bytes, bytes, bytes]],
    ) -> None:
        # Only checkpoints of format v<4 (LangGraph before 0.3) have pending sends to migrate.
        if not pending_sends:
            return
        plain = all(env.parse_tag(t.decode()) is None for t, _ in pending_sends)
        if plain and self.allow_plaintext:
            super()._migrate_pending_sends(pending_sends, checkpoint, channel_values)
            return
        raise UnsupportedCheckpoint(
            "a checkpoint of format v<4 with pending sends: finish or migrate the thread with "
            "a plain LangGraph saver before encrypting it"
        )


@asynccontextmanager
async def encrypted_checkpointer(
    db: Database, ring: KeyRing, *, allow_plaintext: bool = False, max_size: int = 10
) -> AsyncIterator[EncryptedPostgresSaver]:
    """An `EncryptedPostgresSaver` on its own psycopg pool to `db`, on the checkpoint tables
    Signoff's schema made, so a worker login needs no CREATE right.

    Args:
        db: the Signoff database (its URL is used; LangGraph's saver needs psycopg).
        ring: the key ring (`await KeyRing.open(db)`).
        allow_plaintext: read rows not encrypted by Signoff (migration only).
        max_size: the most connections the pool opens.

    Raises:
        SchemaOutOfDate: this langgraph-checkpoint-postgres needs checkpoint tables newer than
            the schema's.
    """
    await _checkpoint_tables_ready(db)
    # autocommit and dict rows: what LangGraph's saver expects. prepare_threshold=0 is what
    # LangGraph's own from_conn_string uses.
    fence = db.fence

    async def checked(conn: AsyncConnection[DictRow]) -> None:
        """A new connection, checked as the database's own are (`ledger.store.fence`). A
        lost history marks the fence, and the saver refuses before using the connection:
        raising here would only make the pool try again until its timeout."""

        async def held(positions: list[int]) -> list[tuple[Any, ...]]:
            async with conn.cursor(row_factory=tuple_row) as cur:
                await cur.execute(HELD_PSYCOPG, (positions,))
                return await cur.fetchall()

        async def value(query: str, *params: object) -> object:
            async with conn.cursor(row_factory=tuple_row) as cur:
                await cur.execute(query, params or None)
                row = await cur.fetchone()
            return row[0] if row else None

        async def standby() -> bool:
            return bool(await value(IN_RECOVERY))

        async def report(positions: list[int], hashes: list[str]) -> object:
            return await value(REPORT_PSYCOPG, positions, hashes)

        with suppress(HistoryLost):
            await fence.check_with(held, standby, report)

    async with AsyncConnectionPool(
        normalize_url(db.url),
        min_size=1,
        max_size=max_size,
        open=False,
        connection_class=AsyncConnection[DictRow],
        kwargs={
            "autocommit": True,
            "row_factory": dict_row,
            "prepare_threshold": 0,
            **_per_host(db.url, db.settings),
        },
        configure=checked,
    ) as pool:
        yield EncryptedPostgresSaver(pool, ring, allow_plaintext=allow_plaintext, fence=fence)


def _per_host(url: str, settings: Settings) -> dict[str, Any]:
    """libpq's `connect_timeout` for a multi-host URL: per host, as `host_connect_seconds`
    means (whole seconds; libpq takes less than 2 as 2, and 0 as no limit at all). Given to
    psycopg, not in the URL: asyncpg would pass it to the server, which refuses it."""
    if len(host_urls(url)) == 1:
        return {}
    return {"connect_timeout": max(2, math.ceil(settings.host_connect_seconds))}


def _lost(
    error: OperationalError,
    conn: AsyncConnection[DictRow] | AsyncConnectionPool[AsyncConnection[DictRow]],
) -> SignoffError | None:
    """The typed error for psycopg's `error`: by its SQLSTATE when it has one (the registry's
    rule), else a connection that failed or dropped (psycopg gives those none)."""
    dsn = conn.conninfo if isinstance(conn, AsyncConnectionPool) else conn.info.dsn
    target = masked(dsn) if isinstance(dsn, str) and "://" in dsn else "the checkpoint database"
    if error.sqlstate is not None:
        return translate(error, target=target)
    return DatabaseUnavailable(target, str(error).splitlines()[0] if str(error) else "lost")


async def _checkpoint_tables_ready(db: Database) -> None:
    """LangGraph's `setup()` would create what is missing, which needs the schema's owner: the
    migration has made the tables, and a newer saver than it knows is refused instead."""
    async with db.connection() as conn:
        done = await conn.fetchval("SELECT max(v) FROM checkpoint_migrations")
    _require_tables(done)


def _require_tables(done: int | None) -> None:
    """Refuse checkpoint tables older than this langgraph-checkpoint-postgres's (None: none)."""
    needed = len(AsyncPostgresSaver.MIGRATIONS) - 1
    if done is None or done < needed:
        raise SchemaOutOfDate(
            f"checkpoint tables at {done}", f"LangGraph's checkpoint tables at {needed}"
        )
