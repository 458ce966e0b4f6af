"""Canonical bytes and hashes: the one definition the journal, verify and auditors share.

Canonical JSON: `json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
allow_nan=False)` encoded as UTF-8. Keys are sorted, there is no white space, floats use Python's
shortest round-trip form and NaN/Infinity are refused. The journal stores this exact text in a
`json` column (which keeps its input verbatim), so verification hashes the stored bytes.

Only values that read back as they were given are accepted (`ledger.limits`): string keys, no
NUL or lone surrogate in any string, finite numbers, integers of at most 4300 digits, at most 64
nested arrays and objects. Integers are written in full and floats in Python's shortest
round-trip form, so `1` and `1.0` are different values with different hashes.

An event's canonical bytes are the tag `signoff.event.v1` followed by six fields, each as a 4-byte
big-endian length and its UTF-8 bytes: stream id, version (decimal), type, actor, recorded-at
(`YYYY-MM-DDTHH:MM:SS.ffffffZ`, UTC) and the canonical JSON of the data. Length prefixes make the
encoding unambiguous whatever the fields contain.

Chain: `hash(event) = SHA-256(hash(previous event of the stream) || canonical bytes)`; the first
event of a stream chains from 32 zero bytes (`GENESIS_HASH`).
"""

from __future__ import annotations

import hashlib
import json
import struct
from datetime import UTC, datetime
from typing import Any

from .errors import InvalidEvent, InvalidJson
from .limits import containers_ok, json_problem, json_text_ok

__all__ = [
    "EVENT_TAG",
    "GENESIS_HASH",
    "canonical_json",
    "chain_hash",
    "event_bytes",
    "format_time",
    "json_digest",
    "sha256_hex",
]

EVENT_TAG = b"signoff.event.v1"
GENESIS_HASH = bytes(32)
_LENGTH = struct.Struct(">I")


def canonical_json(value: Any) -> str:
    """Return the canonical JSON text of `value`.

    Raises:
        InvalidJson: not a JSON value as `ledger.limits` defines it (sets, bytes, objects,
            non-string keys, NaN or infinity, NUL or lone surrogates, nested too deep).
    """
    # The cheap checks first; the full walk runs only to say what is wrong.
    try:
        text = containers_ok(value) and json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except (TypeError, ValueError) as e:
        raise InvalidJson(json_problem(value) or str(e)) from e
    if not text or not json_text_ok(text):
        raise InvalidJson(json_problem(value) or "not a JSON value")
    return text


def format_time(moment: datetime) -> str:
    """The canonical text of a time: UTC, microseconds, trailing Z."""
    if moment.tzinfo is None:
        raise InvalidEvent("times in the journal must be timezone-aware")
    if moment.utcoffset():
        moment = moment.astimezone(UTC)
    # isoformat with microseconds is the same text as strftime("%Y-%m-%dT%H:%M:%S.%fZ") for
    # years 1000-9999, at a fraction of the cost (this runs for every event appended and checked).
    return moment.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def event_bytes(
    stream_id: str, version: int, type_: str, actor: str, recorded_at: datetime, data_json: str
) -> bytes:
    """The canonical bytes of one event (see the module docstring)."""
    parts = [EVENT_TAG]
    for field in (stream_id, str(version), type_, actor, format_time(recorded_at), data_json):
        encoded = field.encode("utf-8")
        parts.append(_LENGTH.pack(len(encoded)))
        parts.append(encoded)
    return b"".join(parts)


def chain_hash(previous: bytes, canonical: bytes) -> bytes:
    """The hash of an event given the hash of the one before it in its stream."""
    return hashlib.sha256(previous + canonical).digest()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def json_digest(value: Any) -> str:
    """SHA-256 (hex) of the canonical JSON of `value`: how arguments and results are named in
    the journal without being stored there in clear."""
    return sha256_hex(canonical_json(value).encode("utf-8"))
