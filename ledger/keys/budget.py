"""The nonce budget of sealing keys: how many messages one process may still seal under each.

AES-256-GCM with random 96-bit nonces is safe for well under 2^32 messages per key (the chance
of a repeated nonce grows with the square of the count). `data_keys.sealed` counts the messages
sealed under each key, across every process. A process reserves counts in blocks before it seals
(`KeyRing.refresh` and `KeyRing.fresh`, which callers await before they write), so sealing itself
never waits for the database. Blocks start small, so a short-lived process wastes little, and
grow to `MAX_BLOCK`; a block reserved by a process that dies is lost, which only makes the count
high. Past `BUDGET` the ring refuses to seal under the key until it is rotated, and it logs a
warning once a key has used half of it.

Pure bookkeeping, no I/O; one lock, because sealing also runs in worker threads.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from ..errors import NonceBudgetExhausted, NoNonceReservation

__all__ = ["BUDGET", "MAX_BLOCK", "MIN_LEFT", "NonceBudget"]

BUDGET = 2**31
"""Messages one key may seal: half of 2^32, leaving the count room for lost blocks."""
MIN_LEFT = 1024
"""Below this many messages left, `fresh()` reserves another block: what a caller may seal
between two awaits of `fresh()`."""
MAX_BLOCK = 4096
_FIRST_BLOCK = 1024


@dataclass(slots=True)
class _Key:
    left: int = 0
    next_block: int = _FIRST_BLOCK
    exhausted: bool = False
    warned: bool = False


class NonceBudget:
    """What this process has reserved, per key id."""

    def __init__(self, budget: int = BUDGET) -> None:
        self.budget = budget
        self._keys: dict[str, _Key] = {}
        self._lock = threading.Lock()

    def wanted(self, key_ids: list[str]) -> list[tuple[str, int]]:
        """The blocks to reserve now: (key id, messages) for each key that runs low."""
        with self._lock:
            keys = [(k, self._keys.setdefault(k, _Key())) for k in key_ids]
            return [(k, key.next_block) for k, key in keys if _low(key)]

    def granted(self, key_id: str, count: int, total: int) -> bool:
        """Record a reservation of `count` that brought the key's counter to `total`; return
        whether the key just passed half its budget (to warn once)."""
        with self._lock:
            key = self._keys.setdefault(key_id, _Key())
            usable = min(count, self.budget - (total - count))
            key.left += max(usable, 0)
            key.exhausted = usable < count
            key.next_block = min(key.next_block * 2, MAX_BLOCK)
            warn = total >= self.budget // 2 and not key.warned
            key.warned = key.warned or warn
            return warn

    def take(self, key_id: str, purpose: str) -> None:
        """Count one message sealed under `key_id`.

        Raises:
            NonceBudgetExhausted: the key has sealed its budget; rotate it.
            NoNonceReservation: this process has nothing left reserved under the key.
        """
        with self._lock:
            key = self._keys.get(key_id)
            if key is not None and key.left > 0:
                key.left -= 1
                return
            if key is not None and key.exhausted:
                raise NonceBudgetExhausted(key_id, purpose, self.budget)
            raise NoNonceReservation(key_id)


def _low(key: _Key) -> bool:
    return key.left < MIN_LEFT and not key.exhausted
