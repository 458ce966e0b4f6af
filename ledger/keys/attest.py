"""Signed statements and MACed records: how a decision proves who made it, and how any other
event proves it was written by a holder of the ring.

A statement is what a reviewer decided about one subject (an approval, a sticky grant, an
`outcome_unknown` call). Its signed bytes are

    b"signoff.statement.v1|" + canonical JSON of
    [binding, subject, kind, payload digest, reviewer, groups (sorted), at, key id]

signed with Ed25519 by the active `decision_signing` key, which only the reviewer side holds.
The payload digest is SHA-256 of the canonical JSON of what the decision carries besides its
kind (a reason, sealed edited arguments or answer, a grant's terms), so nothing can be swapped
under a signature. An event carries its statement as `{"key_id": ..., "signature": base64}`.

A record MAC is HMAC-SHA256 under the active approval-MAC key over

    b"signoff.record.v1|" + canonical JSON of
    [binding, stream id, version, type, actor, canonical JSON of the data without "mac"]

carried in the data as `"mac": {"key_id": ..., "tag": base64}`. Workers and reviewers both hold
the MAC key: a MAC shows the event was written with the ring, not by someone with a database
login only.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..canonical import canonical_json, jcs_read_back, json_digest
from ..errors import PublicKeyMismatch, UnknownKey
from .ring import KeyRing, Purpose

__all__ = [
    "MAC_FIELD",
    "Statement",
    "mac_record",
    "record_mac_ok",
    "sign_statement",
    "statement_ok",
]

MAC_FIELD = "mac"
_STATEMENT_TAG = b"signoff.statement.v1|"
_RECORD_TAG = b"signoff.record.v1|"


@dataclass(frozen=True, slots=True)
class Statement:
    """What a signature vouches for. `at` is an aware datetime's canonical text (`format_time`)."""

    binding: str
    subject: str
    kind: str
    payload: Mapping[str, Any]
    reviewer: str
    groups: tuple[str, ...]
    at: str

    def message(self, key_id: str) -> bytes:
        fields = [
            self.binding,
            self.subject,
            self.kind,
            json_digest(dict(self.payload)),
            self.reviewer,
            sorted(self.groups),
            self.at,
            key_id,
        ]
        return _STATEMENT_TAG + canonical_json(fields).encode()


def sign_statement(ring: KeyRing, statement: Statement) -> dict[str, str]:
    """The statement signed by the active decision key, as event JSON holds it.

    Raises:
        ReviewerKekMissing: the ring has no reviewer KEK (an agent worker's).
    """
    # Over the payload as the journal reads it back, where statements are checked.
    statement = replace(statement, payload=jcs_read_back(dict(statement.payload)))
    key_id = ring.active_key_id(Purpose.DECISION_SIGNING)
    _, signature = ring.sign(statement.message(key_id), Purpose.DECISION_SIGNING)
    return {"key_id": key_id, "signature": base64.b64encode(signature).decode()}


async def statement_ok(ring: KeyRing, statement: Statement, signed: Any) -> str | None:
    """None when `signed` (`sign_statement`'s JSON) is a valid signature of `statement`; else
    what is wrong with it."""
    if not isinstance(signed, Mapping):
        return "unsigned"
    parsed = _keyed(signed, "signature", "signature")
    if isinstance(parsed, str):
        return parsed
    key_id, signature = parsed
    try:
        ok = await ring.verify_signature(
            key_id, statement.message(key_id), signature, Purpose.DECISION_SIGNING
        )
    except UnknownKey as e:
        return f"signed by an unknown key: {e}"
    except PublicKeyMismatch as e:
        return f"signed by a key the journal does not vouch for: {e}"
    return None if ok else f"its signature does not verify under {key_id}"


def _keyed(value: Mapping[str, Any], field: str, what: str) -> tuple[str, bytes] | str:
    """The key id and the decoded bytes of `{"key_id": ..., field: <base64>}`; else what is
    wrong with it."""
    key_id, text = value.get("key_id"), value.get(field)
    if not isinstance(key_id, str) or not isinstance(text, str):
        return f"its {what} is malformed"
    try:
        return key_id, base64.b64decode(text, validate=True)
    except binascii.Error:
        return f"its {what} is not base64"


def _record_bytes(
    binding: str, stream_id: str, version: int, type_: str, actor: str, data: Mapping[str, Any]
) -> bytes:
    body = canonical_json({k: v for k, v in data.items() if k != MAC_FIELD})
    fields = [binding, stream_id, version, type_, actor, body]
    return _RECORD_TAG + canonical_json(fields).encode()


def mac_record(
    ring: KeyRing,
    binding: str,
    stream_id: str,
    version: int,
    type_: str,
    actor: str,
    data: Mapping[str, Any],
) -> dict[str, Any]:
    """`data` with its MAC (the event's binding, place, type, actor and data). The MAC is over
    the data as the journal reads it back (`jcs_read_back`: RFC 8785 writes 1.0 as 1), which
    is what `record_mac_ok` sees, and so is the data returned."""
    data = jcs_read_back(data)
    key_id, tag = ring.mac(_record_bytes(binding, stream_id, version, type_, actor, data))
    return {**data, MAC_FIELD: {"key_id": key_id, "tag": base64.b64encode(tag).decode()}}


async def record_mac_ok(
    ring: KeyRing,
    binding: str,
    stream_id: str,
    version: int,
    type_: str,
    actor: str,
    data: Mapping[str, Any],
) -> str | None:
    """None when the data's MAC verifies; else what is wrong ("unsigned": it has none)."""
    mac = data.get(MAC_FIELD)
    if mac is None:
        return "unsigned"
    if not isinstance(mac, Mapping):
        return "its MAC is malformed"
    parsed = _keyed(mac, "tag", "MAC")
    if isinstance(parsed, str):
        return parsed
    key_id, tag = parsed
    message = _record_bytes(binding, stream_id, version, type_, actor, data)
    try:
        ok = await ring.verify_mac(key_id, message, tag)
    except UnknownKey as e:
        return f"MACed by an unknown key: {e}"
    return None if ok else f"its MAC does not verify under {key_id}"
