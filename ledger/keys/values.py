"""Values sealed to one part of one stream (a call's arguments and result, an approval's
arguments, edits and answers): the one envelope of `sealing`, under the RESULT purpose, bound
to `<stream id>:<part>`, so a value opens only in the place it was written for.

A sealed value is bytes: a `bytea` column holds it as it is; event JSON, which holds no bytes,
holds its base64 text (`as_text` / `from_text`).
"""

from __future__ import annotations

import base64

from .ring import KeyRing, Purpose

__all__ = ["as_text", "from_text", "open_value", "seal_value"]


def _context(stream_id: str, part: str) -> str:
    return f"{stream_id}:{part}"


def seal_value(ring: KeyRing, stream_id: str, part: str, text: str) -> bytes:
    """`text` encrypted under the active result key, bound to `stream_id` and `part`."""
    return ring.encrypt(Purpose.RESULT, text.encode(), _context(stream_id, part).encode())


async def open_value(ring: KeyRing, stream_id: str, part: str, sealed: bytes) -> str:
    """The text `seal_value` sealed to this stream and part.

    Raises:
        UnknownKey, DecryptionFailed: not ours, or altered, or sealed to another place.
    """
    context = _context(stream_id, part)
    opened = await ring.decrypt(Purpose.RESULT, sealed, context.encode(), context)
    return opened.decode()


def as_text(sealed: bytes) -> str:
    """A sealed value as event JSON holds it."""
    return base64.b64encode(sealed).decode("ascii")


def from_text(text: str) -> bytes:
    """The sealed value in an event's JSON."""
    return base64.b64decode(text)
