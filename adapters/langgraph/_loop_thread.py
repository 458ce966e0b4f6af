"""An async context manager held open on an event loop of its own, in a thread, for sync code.

LangGraph's `AsyncPostgresSaver` answers its sync methods (`get_tuple`, `put`, `list`, ...) by
running the async ones on the loop it was made on (`run_coroutine_threadsafe`), so they work from
any thread but that loop's. A program without a running loop (`graph.invoke` in plain code)
needs such a loop to exist: this module runs one in a daemon thread for as long as the context
is open, and makes the saver (and its key ring and database pool, which belong to one loop) on
it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import AbstractAsyncContextManager, contextmanager
from typing import TypeVar

__all__ = ["held_on_loop_thread"]

T = TypeVar("T")

_Entered = tuple[T, asyncio.AbstractEventLoop, asyncio.Event]


@contextmanager
def held_on_loop_thread(
    open_context: Callable[[], AbstractAsyncContextManager[T]], *, name: str
) -> Iterator[T]:
    """Enter `open_context()` on a new event loop in the thread `name`, yield what it gives, and
    leave it there (then stop the loop and join the thread) when the `with` block ends.

    Errors of entering or leaving the context are raised here, in the caller's thread.
    """
    entered: Future[_Entered[T]] = Future()
    left: Future[None] = Future()

    async def hold() -> None:
        done = asyncio.Event()
        async with open_context() as value:
            entered.set_result((value, asyncio.get_running_loop(), done))
            await done.wait()

    def serve() -> None:
        try:
            asyncio.run(hold())
        except BaseException as e:  # handed to the caller's thread, whichever step failed
            (left if entered.done() else entered).set_exception(e)
        else:
            left.set_result(None)

    thread = threading.Thread(target=serve, name=name, daemon=True)
    thread.start()
    try:
        value, loop, done = entered.result()
    except BaseException:
        thread.join()
        raise
    try:
        yield value
    finally:
        loop.call_soon_threadsafe(done.set)
        thread.join()
        left.result()
