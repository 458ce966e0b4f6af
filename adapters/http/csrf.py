"""CSRF tokens for the inbox's session cookie: `X-CSRF-Token` must be the HMAC of the cookie's
credential under a key of the service.

Why this key: it is the SHA-256 of the reviewer side's active decision-signing key's Ed25519
signature over a fixed label. Ed25519 signatures are deterministic, so every replica holding
the same key ring derives the same key with no shared state and no new secret to configure,
and only the reviewer side can derive it (agent workers never hold the decision-signing key).
The signature is never shown or stored, and the label is no statement the key signs otherwise
(those begin `signoff.statement.v1|`), so it vouches for nothing.
Binding the token to the credential makes it useless without the cookie, which a page of
another site can neither read (HttpOnly) nor send (SameSite=Strict). When the signing key
rotates, an old CSRF token stops matching once a replica has read the key ring again (within
`SIGNOFF_KEY_REFRESH_SECONDS`): the inbox then asks `GET /inbox/session` for a new one. For
that long after a rotation, replicas may disagree; a refused request records nothing.
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
        self._derived: tuple[str, bytes] | None = None  # (signing key id, CSRF key)

    def _key(self) -> bytes:
        key_id = self.ring.active_key_id(Purpose.DECISION_SIGNING)
        if self._derived is None or self._derived[0] != key_id:
            _, signature = self.ring.sign(_LABEL, Purpose.DECISION_SIGNING)
            self._derived = key_id, hashlib.sha256(_LABEL + signature).digest()
        return self._derived[1]

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
        async with self.ring.sealing():
            return hmac.compare_digest(self.token_for(credential).encode(), presented.encode())
