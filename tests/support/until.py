"""Waiting in a test for something another task or process brings about.

A test never sleeps for a fixed time to "give it time": it waits for the condition, with a
deadline that fails the test, so a slow machine makes it slower, never wrong.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable

__all__ = ["blocking_until", "until"]

_STEP = 0.05  # seconds between two looks


async def until(
    condition: Callable[[], bool | Awaitable[bool]],
    seconds: float = 20.0,
    what: str = "",
    *,
    step: float = _STEP,
) -> None:
    """Return once `condition()` holds (a plain or an async callable, such as a query); fail
    the test when it has not within `seconds`, naming `what` was awaited. `step`: the seconds
    between two looks (longer for a costly look, as the failover bench's reading its logs)."""
    deadline = time.monotonic() + seconds
    while True:
        held = condition()
        if inspect.isawaitable(held):
            held = await held
        if held:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what or 'the condition'}")
        await asyncio.sleep(step)


def blocking_until(
    condition: Callable[[], bool], seconds: float = 20.0, what: str = "", *, step: float = _STEP
) -> None:
    """`until` for code outside an event loop: blocks the thread while it waits."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what or 'the condition'}")
        time.sleep(step)
