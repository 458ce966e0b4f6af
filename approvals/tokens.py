"""Signed resume tokens: a decision carried through an interrupt/resume, verifiable anywhere.

    token = "so1." base64url(canonical JSON body) "." base64url(HMAC-SHA256)

The body names the approval, its binding hash, the decision kind and the MAC key id; the MAC is
taken under the approval-MAC key of the key ring (shared by every process through the database).
A token proves what a reviewer decided for one binding; the store still decides whether the
decision may be used (once).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from ledger.canonical import canonical_json
from ledger.keys import KeyRing, Purpose
from ledger.limits import json_text_problem, name_problem

from .errors import TokenForged, TokenMalformed

__all__ = ["MAX_TOKEN_CHARS", "ResumeToken", "parse_token", "sign_token", "token_mac_ok"]

_PREFIX = "so1"
_MAC_TAG = b"signoff.token.v1|"
MAX_TOKEN_CHARS = 1024
"""A real token is about 300 characters; anything much longer is refused unread."""
_FIELDS = ("approval_id", "binding", "decision", "key_id")


@dataclass(frozen=True)
class ResumeToken:
    approval_id: str
    binding: str
    decision: str
    key_id: str
    body: bytes
    mac: bytes


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def sign_token(ring: KeyRing, approval_id: str, binding: str, decision: str) -> str:
    """A token for a final decision, MACed under the active approval-MAC key."""
    key_id = ring.active_key_id(Purpose.APPROVAL_MAC)
    body = canonical_json(
        {"approval_id": approval_id, "binding": binding, "decision": decision, "key_id": key_id}
    ).encode()
    _, mac = ring.mac(_MAC_TAG + body)  # the same cache, no await between: the same key
    return f"{_PREFIX}.{_b64(body)}.{_b64(mac)}"


def parse_token(token: Any) -> ResumeToken:
    """Split a token into its parts (no MAC check yet).

    Raises:
        TokenMalformed: not a Signoff resume token.
    """
    if not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS or token.count(".") != 2:
        raise TokenMalformed("not a Signoff resume token")
    prefix, body_text, mac_text = token.split(".")
    if prefix != _PREFIX:
        raise TokenMalformed(f"unknown resume token version {prefix!r}")
    try:
        body, mac = _unb64(body_text), _unb64(mac_text)
        if (problem := json_text_problem(body, max_depth=1)) is not None:
            raise ValueError(problem)  # a flat object; json.loads would recurse on anything
        fields = json.loads(body)
    except (binascii.Error, ValueError) as e:
        raise TokenMalformed(f"resume token does not parse: {e}") from e
    if not isinstance(fields, dict) or set(fields) != set(_FIELDS):
        raise TokenMalformed(f"a resume token's body has exactly the fields {', '.join(_FIELDS)}")
    for name in _FIELDS:
        if (problem := name_problem(fields[name])) is not None:
            raise TokenMalformed(f"resume token field {name} {problem}")
    approval_id, binding, decision, key_id = (fields[name] for name in _FIELDS)
    return ResumeToken(approval_id, binding, decision, key_id, body, mac)


async def token_mac_ok(ring: KeyRing, token: ResumeToken) -> None:
    """Check the token's MAC (constant-time) under the key it names.

    Raises:
        TokenForged: the MAC does not verify.
        UnknownKey: the key id is unknown or retired.
    """
    if not await ring.verify_mac(token.key_id, _MAC_TAG + token.body, token.mac):
        raise TokenForged(f"resume token for approval {token.approval_id} has a bad MAC")
