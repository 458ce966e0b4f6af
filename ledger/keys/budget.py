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
in hand. Past `BUDGET` the ring refuses to seal under the key until it is rotated. Every
process logs a warning once a key has used half of it; past `ROTATE_AT` (three quarters) a
process whose login may rotate keys rotates it, and every other one logs an error once, so
people hear of a key long before anyone is refused.

The database bounds what any login can take, whatever code it runs (`signoff_reserve_nonces`):
one call reserves at most `MAX_RESERVATION` messages (a process's largest block plus its
largest credit), and one login at most `RATE_PER_MINUTE` a minute over all keys. Draining a
key from nothing to `ROTATE_AT` takes one login at least `ROTATE_AT / RATE_PER_MINUTE` minutes
(1,536: more than a day), all of it past the half-budget warning. A process refused by the rate
seals on credit and asks again at its next `sealing()`.

Pure bookkeeping, no I/O; one lock, because sealing also runs in worker threads.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from enum import Enum

from ..errors import NonceBudgetExhausted, NoNonceReservation

__all__ = [
    "BUDGET",
    "MAX_BLOCK",
    "MAX_CREDIT",
    "MAX_RESERVATION",
    "MIN_LEFT",
    "RATE_PER_MINUTE",
    "ROTATE_AT",
    "NonceBudget",
    "Wear",
]

BUDGET = 2**31
"""Messages one key may seal: half of 2^32."""
MIN_LEFT = 1024
"""Below this many messages left, `sealing()` reserves another block."""
MAX_BLOCK = 4096
MAX_CREDIT = 65536
"""Messages a process may seal beyond its reservation before its next `sealing()`."""
MAX_RESERVATION = MAX_BLOCK + MAX_CREDIT
"""The most one `signoff_reserve_nonces` call reserves (the database refuses more)."""
RATE_PER_MINUTE = 2**20
"""The most one database login reserves in a minute, over all keys (the database refuses more)."""
ROTATE_AT = BUDGET // 4 * 3
"""Past this many messages a key is rotated by a process that may, and reported by the rest."""


class Wear(Enum):
    """A threshold a reservation brought a key past, for the first time in this process."""

    NONE = "none"
    HALF = "half"  # warn
    ROTATE = "rotate"  # rotate when allowed, else report loudly


@dataclass(slots=True)
class _Key:
    left: int = 0
    credit: int = 0  # sealed beyond the reservation, not counted in the database yet
    paying: int = 0  # the part of `credit` the reservation under way adds to the count
    next_block: int = MIN_LEFT
    exhausted: bool = False
    warned: bool = False
    worn: bool = False


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

    def granted(self, key_id: str, count: int, total: int) -> Wear:
        """Record a reservation of `count` (as `wanted` asked) that brought the key's counter
        to `total`; return the threshold it passed first in this process (to act on once)."""
        with self._lock:
            key = self._keys.setdefault(key_id, _Key())
            room = self.budget - (total - count) - key.paying  # what the budget still allows
            fresh = count - key.paying
            key.credit -= key.paying
            key.paying = 0
            key.left += max(0, min(fresh, room))
            key.exhausted = room < fresh
            key.next_block = min(key.next_block * 2, MAX_BLOCK)
            return _wear(key, total, self.budget)

    def refused(self, key_ids: list[str]) -> None:
        """The database refused the reservations `wanted` just asked for (the login's rate):
        what they were to pay stays owed, and the next `sealing()` asks again."""
        with self._lock:
            for key_id in key_ids:
                key = self._keys.setdefault(key_id, _Key())
                key.paying = 0

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


def _wear(key: _Key, total: int, budget: int) -> Wear:
    rotate_at = budget // 4 * 3
    if total >= rotate_at and not key.worn:
        key.worn = key.warned = True
        return Wear.ROTATE
    if total >= budget // 2 and not key.warned:
        key.warned = True
        return Wear.HALF
    return Wear.NONE


def _low(key: _Key) -> bool:
    return not key.exhausted and (key.left < MIN_LEFT or key.credit > 0)
