"""Waiting in a test for something another task or process brings about."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


async def until(condition: Callable[[], bool], seconds: float = 20.0) -> None:
    """Return once `condition()` holds; fail the test when it has not within `seconds`."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("not within the time allowed")
        await asyncio.sleep(0.05)
