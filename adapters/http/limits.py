"""Throttling token guessing: a token bucket per client address, spent by failed
authentications.

Each address has `failures` tokens, refilled at `failures` per `per_seconds`; a refused
credential spends one. With none left, the address's requests that carry a credential are
refused before it is checked, until a token is back (`retry_after`). A credential that
authenticates spends nothing. The buckets live in this process's memory: each replica limits
on its own, and a restart forgets them. IPv6 addresses are limited by their /64 (one host
commonly holds the whole prefix).
"""

from __future__ import annotations

import ipaddress
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "DEFAULT_FAILURE_LIMIT",
    "FailureLimit",
    "FailureLimiter",
    "client_key",
    "retry_after_header",
]

MAX_ADDRESSES = 100_000
"""Most addresses tracked at once: past it, the one whose last refusal is oldest is forgotten
(its bucket has most likely refilled)."""


@dataclass(frozen=True)
class FailureLimit:
    """`failures` refused credentials per `per_seconds` from one address; 0 failures: off."""

    failures: int = 10
    per_seconds: float = 60.0

    def __post_init__(self) -> None:
        if self.failures < 0 or self.per_seconds <= 0:
            raise ValueError("a failure limit needs failures >= 0 and per_seconds > 0")


DEFAULT_FAILURE_LIMIT = FailureLimit()
"""10 refused credentials a minute from one address."""


def client_key(host: str | None) -> str:
    """The bucket of an ASGI peer address: the address itself, an IPv6 one's /64."""
    if not host:
        return "unknown"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:  # not an IP address (a Unix socket's peer): as it is
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:  # an IPv4 client of a dual-stack socket
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


def retry_after_header(seconds: float) -> str:
    """`Retry-After` in whole seconds, rounded up (at least 1)."""
    return str(max(1, math.ceil(seconds)))


@dataclass
class _Bucket:
    tokens: float
    at: float


class FailureLimiter:
    """The buckets of one process, by `client_key`."""

    def __init__(
        self,
        limit: FailureLimit | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_addresses: int = MAX_ADDRESSES,
    ) -> None:
        self.limit = limit or DEFAULT_FAILURE_LIMIT
        self._clock = clock
        self._max = max_addresses
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()  # least recently failed first

    @property
    def enabled(self) -> bool:
        return self.limit.failures > 0

    def retry_after(self, key: str) -> float | None:
        """Seconds until `key` may present a credential again; None when it may now."""
        bucket = self._refilled(key)
        if not self.enabled or bucket is None or bucket.tokens >= 1:
            return None
        return (1 - bucket.tokens) / self._rate

    def failed(self, key: str) -> None:
        """A credential from `key` authenticated nobody: spend one of its tokens."""
        if not self.enabled:
            return
        bucket = self._refilled(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(float(self.limit.failures), self._clock())
        self._buckets.move_to_end(key)
        while len(self._buckets) > self._max:
            self._buckets.popitem(last=False)
        bucket.tokens = max(0.0, bucket.tokens - 1)

    @property
    def _rate(self) -> float:
        return self.limit.failures / self.limit.per_seconds

    def _refilled(self, key: str) -> _Bucket | None:
        bucket = self._buckets.get(key)
        if bucket is None:
            return None
        now = self._clock()
        refilled = bucket.tokens + (now - bucket.at) * self._rate
        bucket.tokens = min(float(self.limit.failures), refilled)
        bucket.at = now
        return bucket
