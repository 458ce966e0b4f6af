"""An event as the journal holds it: the type every reader of the journal returns."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any

from ..canonical import event_bytes

__all__ = ["Event"]


@dataclass(frozen=True)
class Event:
    """An event as recorded in the journal. `tag_version` says which canonical form its data
    text and bytes are in (`ledger.canonical`: 3, or 2 for events written before logins were
    recorded); `login` is the database login that wrote it, as the database stamped it (None
    under tag 2)."""

    position: int
    txid: int
    stream_id: str
    version: int
    type: str
    data_json: str
    actor: str
    recorded_at: datetime
    hash: bytes
    tag_version: int
    login: str | None

    @cached_property
    def data(self) -> dict[str, Any]:
        value: dict[str, Any] = json.loads(self.data_json)
        return value

    def canonical_bytes(self) -> bytes:
        """Raises: InvalidEvent: an unknown tag version, or a login that does not fit it."""
        return event_bytes(
            self.stream_id,
            self.version,
            self.type,
            self.actor,
            self.recorded_at,
            self.data_json,
            tag_version=self.tag_version,
            login=self.login,
        )
