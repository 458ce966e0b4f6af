"""How an encrypted checkpoint row looks, and the sealer that makes and opens its ciphertexts.

LangGraph's tables and SQL stay as they are; what changes is what goes in the columns:

    checkpoint_blobs.type   "<serde type>+signoff:<key id>"   blob: the sealed serde bytes
    checkpoint_writes.type  the same                          blob: the sealed serde bytes
    checkpoints.checkpoint  {v, id, ts, channel_versions, channel_values: {snapshot channel: true},
                             "__signoff": {kid, typ, ct}}     ct: the whole checkpoint, sealed
    checkpoints.metadata    {source, step, parents, <delta counters>, "__signoff": {kid, typ, ct}}

Only what LangGraph's own SQL reads stays in clear: `channel_versions` (the blob join, prune),
the `true` markers of `DeltaChannel` snapshots and the delta counters (prune refuses such
threads), `parents` (prune keeps a subgraph's root), `v`, `id`, `ts`, and `source`/`step` (which
LangGraph sets itself and users filter on). Channel values, `versions_seen` and every other
metadata key (anything from `configurable` or `metadata`, e.g. a user id) are sealed. On load the
clear copies must equal the sealed ones, so editing them in SQL is detected.

Every ciphertext is bound (AES-GCM associated data) to its row and to its serde type, so a row
copied to another thread, channel, version, checkpoint or task does not open.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any

from langgraph.checkpoint.base import Checkpoint
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from ledger.errors import DecryptionFailed
from ledger.keys import KeyRing, Purpose, key_id_of

__all__ = [
    "CLEAR_CHECKPOINT_KEYS",
    "CLEAR_METADATA_KEYS",
    "ENVELOPE",
    "TAG_MARK",
    "CheckpointSealer",
    "blob_parts",
    "checkpoint_parts",
    "clear_metadata",
    "contains",
    "context",
    "describe",
    "envelope",
    "envelope_key_id",
    "metadata_parts",
    "open_envelope",
    "parse_tag",
    "plaintext_checkpoint_split",
    "split_checkpoint",
    "tag",
    "verify_checkpoint",
    "verify_metadata",
    "write_parts",
]

ENVELOPE = "__signoff"
TAG_MARK = "+signoff:"
CLEAR_CHECKPOINT_KEYS = ("v", "id", "ts", "channel_versions")
CLEAR_METADATA_KEYS = frozenset(
    {"source", "step", "parents", "counters_since_delta_snapshot", "delta_writes_versioned"}
)
_MARKERS = "__markers"  # inside the sealed checkpoint: which channels are snapshot markers

Parts = tuple[str, ...]


def tag(serde_type: str, key_id: str) -> str:
    return f"{serde_type}{TAG_MARK}{key_id}"


def parse_tag(type_tag: str | None) -> tuple[str, str] | None:
    """(serde type, key id) of one of our tags; None for anything else (plaintext)."""
    if type_tag is None:
        return None
    serde_type, mark, key_id = type_tag.rpartition(TAG_MARK)
    return (serde_type, key_id) if mark and key_id else None


def context(parts: Parts, serde_type: str) -> bytes:
    """Associated data: the row's identity and the serde type, unambiguously encoded."""
    return b"signoff.checkpoint.v1|" + json.dumps([*parts, serde_type]).encode()


def blob_parts(thread_id: str, ns: str, channel: str, version: str) -> Parts:
    return ("blob", thread_id, ns, channel, version)


def write_parts(
    thread_id: str,
    ns: str,
    checkpoint_id: str,
    task_id: str,
    task_path: str,
    idx: int,
    channel: str,
) -> Parts:
    return ("write", thread_id, ns, checkpoint_id, task_id, task_path, str(idx), channel)


def checkpoint_parts(thread_id: str, ns: str, checkpoint_id: str) -> Parts:
    return ("checkpoint", thread_id, ns, checkpoint_id)


def metadata_parts(thread_id: str, ns: str, checkpoint_id: str) -> Parts:
    return ("metadata", thread_id, ns, checkpoint_id)


def describe(parts: Parts) -> str:
    """A row's place for error messages (ids only, never contents)."""
    kind, thread_id, ns, *rest = parts
    where = f"thread {thread_id!r}, namespace {ns!r}"
    if kind == "blob":
        return f"checkpoint blob ({where}, channel {rest[0]!r}, version {rest[1]!r})"
    if kind == "write":
        checkpoint_id, task_id, _path, idx, channel = rest
        return (
            f"pending write ({where}, checkpoint {checkpoint_id!r}, task {task_id!r}, "
            f"idx {idx}, channel {channel!r})"
        )
    if kind == "checkpoint":
        return f"checkpoint {rest[0]!r} ({where})"
    return f"{kind} of checkpoint {rest[0]!r} ({where})"


def envelope(serde_type: str, key_id: str, sealed: bytes) -> dict[str, str]:
    return {"kid": key_id, "typ": serde_type, "ct": base64.b64encode(sealed).decode()}


def envelope_key_id(document: Mapping[str, Any]) -> str | None:
    """The key id of a JSONB column's envelope; None when it has none (plaintext)."""
    env = document.get(ENVELOPE)
    return env.get("kid") if isinstance(env, Mapping) else None


def open_envelope(document: Mapping[str, Any], where: str) -> tuple[str, str, bytes]:
    """(key id, serde type, sealed bytes) of a JSONB column's envelope."""
    env = document[ENVELOPE]
    try:
        key_id, serde_type, sealed = env["kid"], env["typ"], base64.b64decode(env["ct"])
    except (KeyError, TypeError, binascii.Error) as e:
        raise DecryptionFailed(str(env.get("kid", "?")), f"{where}: malformed envelope") from e
    return str(key_id), str(serde_type), sealed


def split_checkpoint(
    checkpoint: Checkpoint,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(clear part, part to seal, blob values): the same inline/blob split as LangGraph's
    saver, but the inline values go into the sealed part instead of clear JSONB."""
    inline: dict[str, Any] = {}
    blobs: dict[str, Any] = {}
    markers: list[str] = []
    for channel, value in checkpoint["channel_values"].items():
        if isinstance(value, _DeltaSnapshot):
            blobs[channel] = value
            markers.append(channel)
        elif value is None or isinstance(value, str | int | float | bool):
            inline[channel] = value
        else:
            blobs[channel] = value
    secret: dict[str, Any] = {**checkpoint, "channel_values": inline, _MARKERS: sorted(markers)}
    return _clear(checkpoint, markers), secret, blobs


def plaintext_checkpoint_split(
    document: Mapping[str, Any], snapshot_channels: list[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(clear part, part to seal) of a checkpoint written by LangGraph's plain saver, whose
    `true` values with a blob behind them (`snapshot_channels`) are `DeltaChannel` markers."""
    values = document.get("channel_values") or {}
    inline = {k: v for k, v in values.items() if k not in snapshot_channels}
    secret = {**document, "channel_values": inline, _MARKERS: sorted(snapshot_channels)}
    return _clear(document, snapshot_channels), secret


def _clear(checkpoint: Mapping[str, Any], markers: list[str]) -> dict[str, Any]:
    clear = {k: checkpoint[k] for k in CLEAR_CHECKPOINT_KEYS if k in checkpoint}
    clear["channel_values"] = dict.fromkeys(markers, True)
    return clear


def clear_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in metadata.items() if k in CLEAR_METADATA_KEYS}


def _json(value: Any) -> Any:
    # Compare as JSONB would hold them (tuples are lists, keys are strings).
    return json.loads(json.dumps(value, default=str))


def verify_checkpoint(
    clear: Mapping[str, Any], sealed: dict[str, Any], key_id: str, where: str
) -> None:
    """Check a checkpoint's clear fields against its sealed copy; pops the sealed markers.

    Raises:
        DecryptionFailed: a clear field was edited (e.g. a rolled-back channel version).
    """
    for key in CLEAR_CHECKPOINT_KEYS:
        if _json(clear.get(key)) != _json(sealed.get(key)):
            raise DecryptionFailed(key_id, f"{where}: its clear field {key!r} was edited")
    markers = sealed.pop(_MARKERS, [])
    if clear.get("channel_values") != dict.fromkeys(markers, True):
        raise DecryptionFailed(key_id, f"{where}: its clear snapshot markers were edited")


def verify_metadata(
    clear: Mapping[str, Any], sealed: Mapping[str, Any], key_id: str, where: str
) -> None:
    """Check the clear metadata keys against the sealed metadata.

    Raises:
        DecryptionFailed: a clear key was edited, added or removed.
    """
    shown = {k: v for k, v in clear.items() if k != ENVELOPE}
    if _json(shown) != _json(clear_metadata(sealed)):
        raise DecryptionFailed(key_id, f"{where}: its clear keys were edited")


def contains(document: Any, wanted: Any) -> bool:
    """JSONB containment (`document @> wanted`) in Python, for filters on sealed metadata."""
    if isinstance(wanted, Mapping):
        return isinstance(document, Mapping) and all(
            k in document and contains(document[k], v) for k, v in wanted.items()
        )
    if isinstance(wanted, list | tuple):
        return isinstance(document, list | tuple) and all(
            any(contains(d, w) for d in document) for w in wanted
        )
    return bool(document == wanted)


class CheckpointSealer:
    """Seals and opens checkpoint values with the ring's checkpoint keys, bound to their rows
    (no I/O but the ring's refresh when a ciphertext names a key it has not seen)."""

    def __init__(self, ring: KeyRing, serde: SerializerProtocol) -> None:
        self.ring = ring
        self.serde = serde

    def seal(self, serde_type: str, data: bytes, parts: Parts) -> tuple[str, bytes]:
        """(key id, sealed bytes) of `data` under the active checkpoint key."""
        sealed = self.ring.encrypt(Purpose.CHECKPOINT, data, context(parts, serde_type))
        # The key id comes from the ciphertext, not `active_key_id`: a refresh on the event loop
        # may switch keys while this runs in a worker thread.
        key_id = key_id_of(sealed)
        if key_id is None:  # the ring writes nothing else; checked so a change cannot slip by
            raise RuntimeError("the key ring returned a value that is not a Signoff ciphertext")
        return key_id, sealed

    def seal_value(self, value: Any, parts: Parts) -> tuple[str, bytes]:
        """(type tag, sealed bytes) of a channel value or write."""
        return self.seal_typed(self.serde.dumps_typed(value), parts)

    def seal_typed(self, typed: tuple[str, bytes], parts: Parts) -> tuple[str, bytes]:
        """`seal_value` of a value the serializer has turned into (serde type, bytes)."""
        serde_type, data = typed
        key_id, sealed = self.seal(serde_type, data, parts)
        return tag(serde_type, key_id), sealed

    def seal_document(self, document: Any, parts: Parts) -> dict[str, str]:
        """The envelope of a checkpoint or metadata document."""
        return self.envelope_of(self.serde.dumps_typed(document), parts)

    def envelope_of(self, typed: tuple[str, bytes], parts: Parts) -> dict[str, str]:
        """`seal_document` of a document the serializer has turned into (serde type, bytes)."""
        serde_type, data = typed
        key_id, sealed = self.seal(serde_type, data, parts)
        return envelope(serde_type, key_id, sealed)

    async def open(self, key_id: str, serde_type: str, sealed: bytes | None, parts: Parts) -> bytes:
        """The plaintext of `sealed`, written for the row `parts` with `serde_type`.

        Raises:
            DecryptionFailed: altered, or copied from another row (the error names the row).
            UnknownKey: its key is unknown or retired.
        """
        where = describe(parts)
        if sealed is None or key_id_of(sealed) != key_id:
            raise DecryptionFailed(key_id, f"{where}: its type tag and ciphertext disagree")
        associated = context(parts, serde_type)
        return await self.ring.decrypt(Purpose.CHECKPOINT, sealed, associated, where)
