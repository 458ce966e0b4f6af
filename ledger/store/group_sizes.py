"""The sizes of the groups that group commit sends (`group.GroupedCalls`), for whoever measures
them: the OpenTelemetry histogram `signoff.group_commit.steps` (`ledger.telemetry`, a no-op
until the application installs an SDK), and `listen(callback)`, told the steps of every group
this process sends until the returned function is called: `signoff serve` listens with a
Prometheus histogram.

Listeners run in the sender's task, between the statement and its callers' results: each must
be quick and must not block. One that raises is ignored, so a broken listener never fails a
commit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from ..telemetry import group_steps

__all__ = ["listen", "sent"]

_listeners: dict[object, Callable[[int], None]] = {}


def listen(callback: Callable[[int], None]) -> Callable[[], None]:
    """Call `callback(steps)` for every group this process sends; returns what stops it (once
    or more: the later calls do nothing). The same callback given twice is called twice."""
    key = object()
    _listeners[key] = callback

    def unsubscribe() -> None:
        _listeners.pop(key, None)

    return unsubscribe


def sent(steps: int) -> None:
    """A group of `steps` steps was sent: record it, and tell every listener."""
    group_steps.record(steps)
    for callback in tuple(_listeners.values()):
        with contextlib.suppress(Exception):  # a listener never fails a commit
            callback(steps)
