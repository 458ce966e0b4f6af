"""Opening a checkpoint row: the one place a row LangGraph's SQL read is decrypted and
deserialized into a `CheckpointTuple`.

Every sealed part is opened with the row identity it was sealed under (`_envelope`'s parts), so a
value moved to another row fails to open instead of being read as that row's. Plaintext rows
(written by a plain saver) open only when the saver allows them, with one warning per saver.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import itemgetter
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from psycopg.rows import DictRow

from ledger.errors import DecryptionFailed
from ledger.log import get_logger

from . import _envelope as env
from ._envelope import CheckpointSealer
from .errors import PlaintextCheckpoint

__all__ = ["RowOpener"]

log = get_logger(__name__)

_EMPTY = object()  # LangGraph's "empty" blob: the channel has no value


@dataclass
class RowOpener:
    """Decrypts and deserializes the rows of one saver (its sealer and serializer)."""

    sealer: CheckpointSealer
    serde: SerializerProtocol
    allow_plaintext: bool = False
    _warned_plaintext: bool = False

    async def checkpoint_tuple(self, value: DictRow) -> CheckpointTuple:
        """The tuple of a row as LangGraph's select returns it (checkpoint, metadata, blobs
        and pending writes aggregated), every sealed part opened and checked."""
        thread_id, ns = value["thread_id"], value["checkpoint_ns"]
        checkpoint_id = value["checkpoint_id"]
        parts = env.checkpoint_parts(thread_id, ns, checkpoint_id)
        checkpoint = await self.document(value["checkpoint"], parts)
        if env.ENVELOPE in value["checkpoint"]:
            kid = env.envelope_key_id(value["checkpoint"]) or "?"
            env.verify_checkpoint(value["checkpoint"], checkpoint, kid, env.describe(parts))
        meta_parts = env.metadata_parts(thread_id, ns, checkpoint_id)
        metadata = await self.document(value["metadata"], meta_parts)
        if env.ENVELOPE in value["metadata"]:
            kid = env.envelope_key_id(value["metadata"]) or "?"
            env.verify_metadata(value["metadata"], metadata, kid, env.describe(meta_parts))

        channel_values = dict(checkpoint.get("channel_values") or {})
        versions = checkpoint["channel_versions"]
        for channel_b, tag_b, blob in value["channel_values"] or []:
            channel = channel_b.decode()
            blob_parts = env.blob_parts(thread_id, ns, channel, str(versions[channel]))
            decoded = await self.value(tag_b.decode(), blob, blob_parts)
            if decoded is not _EMPTY:
                channel_values[channel] = decoded
        checkpoint["channel_values"] = channel_values

        writes: list[tuple[tuple[str, str, int], tuple[str, str, Any]]] = []
        for task_b, channel_b, tag_b, blob, path_b, idx_b in value["pending_writes"] or []:
            task_id, channel, path = task_b.decode(), channel_b.decode(), path_b.decode()
            idx = int(idx_b.decode())
            write_parts = env.write_parts(thread_id, ns, checkpoint_id, task_id, path, idx, channel)
            type_tag = tag_b.decode() if tag_b is not None else None
            decoded = await self.value(type_tag, blob, write_parts)
            writes.append((writes_sort_key(path, task_id, idx), (task_id, channel, decoded)))
        writes.sort(key=itemgetter(0))

        parent_id = value["parent_checkpoint_id"]
        return CheckpointTuple(
            _config(thread_id, ns, checkpoint_id),
            cast(Checkpoint, checkpoint),
            cast(CheckpointMetadata, metadata),
            _config(thread_id, ns, parent_id) if parent_id else None,
            [write for _, write in writes],
        )

    async def document(self, document: dict[str, Any], parts: env.Parts) -> dict[str, Any]:
        """A checkpoint or metadata JSONB column as LangGraph wrote it (sealed part opened)."""
        if env.ENVELOPE not in document:
            self._plaintext(parts, "no Signoff envelope")
            return dict(document)
        key_id, serde_type, sealed = env.open_envelope(document, env.describe(parts))
        data = await self.sealer.open(key_id, serde_type, sealed, parts)
        opened = self.serde.loads_typed((serde_type, data))
        if not isinstance(opened, dict):
            raise DecryptionFailed(key_id, f"{env.describe(parts)}: not a document")
        return opened

    async def value(self, type_tag: str | None, blob: bytes | None, parts: env.Parts) -> Any:
        """A channel value or pending write (`_EMPTY` for LangGraph's empty blob)."""
        parsed = env.parse_tag(type_tag)
        if parsed is None:
            self._plaintext(parts, f"type {type_tag!r}")
            if type_tag == "empty" or type_tag is None or blob is None:
                return _EMPTY
            return self.serde.loads_typed((type_tag, blob))
        serde_type, key_id = parsed
        data = await self.sealer.open(key_id, serde_type, blob, parts)
        return _EMPTY if serde_type == "empty" else self.serde.loads_typed((serde_type, data))

    def _plaintext(self, parts: env.Parts, found: str) -> None:
        if not self.allow_plaintext:
            raise PlaintextCheckpoint(env.describe(parts), found)
        if not self._warned_plaintext:
            self._warned_plaintext = True
            log.warning(
                "reading plaintext checkpoint rows (allow_plaintext); convert them with "
                "`signoff checkpoints reencrypt --include-plaintext`",
                thread_id=parts[1],
            )


def _config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    ids = {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}
    return {"configurable": ids}
