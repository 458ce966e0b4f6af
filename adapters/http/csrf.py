"""CSRF tokens for the inbox's session cookie: `X-CSRF-Token` must be the HMAC of the cookie's
credential under a key of the service.

Why this key: it is the SHA-256 of the reviewer side's active decision-signing key's Ed25519
signature over a fixed label. Ed25519 signatures are deterministic, so every replica holding
the same key ring derives the same key with no shared state and no new secret to configure,
and only the reviewer side can derive it (agent workers never hold the decision-signing key).
Binding the token to the credential makes it useless without the cookie, which a page of
another site can neither read (HttpOnly) nor send (SameSite=Strict). When the signing key
rotates, an old CSRF token stops matching: the inbox asks `GET /inbox/session` for a new one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from ledger.keys import KeyRing, Purpose

__all__ = ["CSRF_HEADER", "CsrfKey"]

CSRF_HEADER = "X-CSRF-Token"
_LABEL = b"signoff.inbox.csrf.v1"


class CsrfKey:
    """Makes and checks the CSRF token of a session credential."""

    def __init__(self, ring: KeyRing) -> None:
        self.ring = ring

    def _key(self) -> bytes:
        _, signature = self.ring.sign(_LABEL, Purpose.DECISION_SIGNING)
        return hashlib.sha256(_LABEL + signature).digest()

    def token_for(self, credential: str) -> str:
        """The CSRF token of `credential` (URL-safe base64, no padding)."""
        tag = hmac.new(self._key(), credential.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(tag).decode().rstrip("=")

    async def check(self, credential: str, presented: str | None) -> bool:
        """Whether `presented` is `credential`'s token (constant-time), under the active key;
        on a mismatch the key ring is read again once (another replica may have rotated)."""
        if not presented:
            return False
        if hmac.compare_digest(self.token_for(credential).encode(), presented.encode()):
            return True
        await self.ring.fresh()
        return hmac.compare_digest(self.token_for(credential).encode(), presented.encode())
