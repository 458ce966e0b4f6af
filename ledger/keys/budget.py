"""The nonce budget of sealing keys: how many messages one process may still seal under each.

AES-256-GCM with random 96-bit nonces is safe for well under 2^32 messages per key (the chance
of a repeated nonce grows with the square of the count). `data_keys.sealed` counts the messages
sealed under each key, across every process. A process reserves counts in blocks before it seals
(`KeyRing.refresh`, and `KeyRing.sealing()` around the seals that follow), so sealing itself
never waits for the database. Blocks start at `MIN_LEFT` and grow to `MAX_BLOCK`; a block
reserved by a process that dies is lost, which only makes the count high.

A caller that seals more within one `sealing()` block than it had reserved (a re-encryption
batch, say) runs on credit, up to `MAX_CREDIT` messages, which the next reservation adds to the
count; only a process that dies first leaves those uncounted, and the budget keeps half of 2^32
in hand. Past `BUDGET` the ring refuses to seal under the key until it is rotated, and it logs a
warning once a key has used half of it.

Pure bookkeeping, no I/O; one lock, because sealing also runs in worker threads.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from ..errors import NonceBudgetExhausted, NoNonceReservation

__all__ = ["BUDGET", "MAX_BLOCK", "MAX_CREDIT", "MIN_LEFT", "NonceBudget"]

BUDGET = 2**31
"""Messages one key may seal: half of 2^32."""
MIN_LEFT = 1024
"""Below this many messages left, `sealing()` reserves another block."""
MAX_BLOCK = 4096
MAX_CREDIT = 65536
"""Messages a process may seal beyond its reservation before its next `sealing()`."""


@dataclass(slots=True)
class _Key:
    left: int = 0
    credit: int = 0  # sealed beyond the reservation, not counted in the database yet
    paying: int = 0  # the part of `credit` the reservation under way adds to the count
    next_block: int = MIN_LEFT
    exhausted: bool = False
    warned: bool = False


class NonceBudget:
    """What this process has reserved, per key id."""

    def __init__(self, budget: int = BUDGET) -> None:
        self.budget = budget
        self._keys: dict[str, _Key] = {}
        self._lock = threading.Lock()

    def runs_low(self, key_ids: list[str]) -> bool:
        """Whether any of these keys needs a reservation (what `sealing()` checks every time)."""
        with self._lock:
            keys = [self._keys.get(k) for k in key_ids]
            return any(k is None or _low(k) for k in keys)

    def wanted(self, key_ids: list[str]) -> list[tuple[str, int]]:
        """The reservations to make now: (key id, messages) for each key that runs low or
        owes, its credit included."""
        wanted: list[tuple[str, int]] = []
        with self._lock:
            for key_id in key_ids:
                key = self._keys.setdefault(key_id, _Key())
                if _low(key):
                    key.paying = key.credit
                    wanted.append((key_id, key.next_block + key.paying))
        return wanted

    def granted(self, key_id: str, count: int, total: int) -> bool:
        """Record a reservation of `count` (as `wanted` asked) that brought the key's counter
        to `total`; return whether the key just passed half its budget (to warn once)."""
        with self._lock:
            key = self._keys.setdefault(key_id, _Key())
            room = self.budget - (total - count) - key.paying  # what the budget still allows
            fresh = count - key.paying
            key.credit -= key.paying
            key.paying = 0
            key.left += max(0, min(fresh, room))
            key.exhausted = room < fresh
            key.next_block = min(key.next_block * 2, MAX_BLOCK)
            warn = total >= self.budget // 2 and not key.warned
            key.warned = key.warned or warn
            return warn

    def take(self, key_id: str, purpose: str) -> None:
        """Count one message sealed under `key_id`.

        Raises:
            NonceBudgetExhausted: the key has sealed its budget; rotate it.
            NoNonceReservation: this process has sealed `MAX_CREDIT` messages beyond what it
                reserved under the key since it last entered `sealing()`.
        """
        with self._lock:
            key = self._keys.setdefault(key_id, _Key())
            if key.left > 0:
                key.left -= 1
            elif key.exhausted:
                raise NonceBudgetExhausted(key_id, purpose, self.budget)
            elif key.credit < MAX_CREDIT:
                key.credit += 1
            else:
                raise NoNonceReservation(key_id)


def _low(key: _Key) -> bool:
    return not key.exhausted and (key.left < MIN_LEFT or key.credit > 0)
