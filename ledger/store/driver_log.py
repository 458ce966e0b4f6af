"""What the driver logs on its own, turned into one structured line per outage.

asyncpg's pool keeps its floor of open connections (`min_size`) by reconnecting in the
background, and logs every attempt that fails, with its traceback, on the `asyncpg.pool`
logger. While the database is down (a restart) that is a traceback a second on stderr, in any
process that has not configured logging (Python's last-resort handler prints it) and in the
`signoff` command. A filter on that logger drops those records; Signoff logs instead one
warning, at most once a minute, and callers meet `DatabaseUnavailable` as usual. Nothing else
about logging is touched: no handler, no level.
"""

from __future__ import annotations

import logging
import time

from ..log import get_logger

__all__ = ["quiet_pool_floor"]

log = get_logger("ledger.store.db")

_FLOOR = "Failed to restore the pool connection floor"
_EVERY = 60.0  # seconds between two lines about the same kind of failure


class _PoolFloorFilter(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self._told = -float("inf")

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.getMessage().startswith(_FLOOR):
            return True
        if time.monotonic() - self._told >= _EVERY:
            self._told = time.monotonic()
            error = record.exc_info[1] if record.exc_info else None
            log.warning(
                "database unreachable; the pool keeps trying to reconnect",
                error_type=type(error).__name__ if error is not None else None,
                error=str(error) if error is not None else None,
            )
        return False


def quiet_pool_floor() -> None:
    """Install the filter on `asyncpg.pool` (once per process)."""
    logger = logging.getLogger("asyncpg.pool")
    if not any(isinstance(f, _PoolFloorFilter) for f in logger.filters):
        logger.addFilter(_PoolFloorFilter())
