"""The `requestState` of a call waiting for its approval (MCP 2026-07-28).

The SDK's `RequestStateBoundary` wraps what the gateway hands it in an envelope that binds the
method, the tool, a digest of the arguments, the principal and an expiry; `RingCodec` seals
that envelope under Signoff's ring (the result-sealing key, its own associated data), so every
gateway process of one database opens what another sealed, and nothing but Signoff's key ring
is configured. Single use is not the envelope's: the approval it names is consumed once, in
the call's intent transaction, and a state whose call is in the ledger already is refused.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

from mcp.server.request_state import InvalidRequestState

from ledger.errors import SignoffError, UnknownKey
from ledger.keys import KeyRing
from ledger.keys.cache import Purpose
from ledger.keys.sealing import key_id_of

__all__ = ["PendingCall", "RingCodec", "ready_to_seal"]

_CONTEXT = b"signoff.mcp.request_state.v1"
_PREFIX = "sgs1."


class RingCodec:
    """The SDK's `RequestStateCodec` over Signoff's ring: AES-256-GCM under the active result
    key, bound to `context` (the associated data: a requestState's, a task handle's).
    Synchronous, as the SDK asks: it opens with keys this process has loaded (the ring
    refreshes them as it serves calls)."""

    def __init__(self, ring: KeyRing, context: bytes = _CONTEXT) -> None:
        self.ring, self.context = ring, context

    def seal(self, payload: bytes) -> str:
        sealed = self.ring.encrypt(Purpose.RESULT, payload, self.context)
        return _PREFIX + base64.urlsafe_b64encode(sealed).decode().rstrip("=")

    def unseal(self, token: str) -> bytes:
        sealed = _sealed(token)
        if sealed is None:
            raise InvalidRequestState("malformed")
        try:
            return self.ring.decrypt_cached(Purpose.RESULT, sealed, self.context, "requestState")
        except SignoffError as e:
            raise InvalidRequestState(type(e).__name__) from None


async def ready_to_seal(ring: KeyRing, token: str | None = None) -> None:
    """Ready `ring` for the synchronous codec: refreshed when older than its interval, nonces
    reserved for the seals that follow, and the key `token` names loaded (another process may
    have sealed it under a key made since; one nobody made is the codec's to refuse)."""
    sealed = _sealed(token) if token is not None else None
    key_id = key_id_of(sealed) if sealed is not None else None
    keys = [(key_id, Purpose.RESULT)] if key_id is not None else []
    try:
        async with ring.sealing(keys=keys):
            pass
    except UnknownKey:
        async with ring.sealing():
            pass


def _sealed(token: str) -> bytes | None:
    if not isinstance(token, str) or not token.startswith(_PREFIX) or len(token) > 16_384:
        return None
    body = token[len(_PREFIX) :]
    try:
        return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    except ValueError:
        return None


@dataclass(frozen=True)
class PendingCall:
    """What a round hands the next: the approval asked for, and the call it is for."""

    approval_id: str
    run_id: str
    call_id: str

    def to_state(self) -> str:
        return json.dumps(
            {"approval": self.approval_id, "run": self.run_id, "call": self.call_id},
            separators=(",", ":"),
        )

    @classmethod
    def from_state(cls, text: str) -> PendingCall:
        """Raises: ValueError: not a state this gateway made (the SDK checked its seal)."""
        data = json.loads(text)
        if not isinstance(data, dict) or not all(
            isinstance(data.get(k), str) for k in ("approval", "run", "call")
        ):
            raise ValueError("not a Signoff requestState")
        return cls(data["approval"], data["run"], data["call"])
