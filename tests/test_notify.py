"""The listener's certainty that a payload was not notified (`Listener.mark`, `quiet_since`):
only on the connection the mark was taken on, and only within what it remembers; and `woken`,
the one wait for a notification or a timeout."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from ledger.store.notify import _RECENT_KEPT, Listener, woken

from .support.until import until

CHANNEL = "signoff_test_quiet"


async def test_a_listener_is_sure_of_silence_only_on_one_connection_and_within_its_memory(
    database_url: str,
) -> None:
    listener = Listener(database_url, CHANNEL, reconnect_delay=0.05)
    assert listener.mark() is None  # not listening: no mark, never sure
    assert not listener.quiet_since("p", None)
    await listener.start()
    await listener.until_connected()
    conn = await asyncpg.connect(database_url)
    try:
        mark = listener.mark()
        assert listener.quiet_since("p", mark) and listener.quiet_since("q", mark)
        await conn.execute(f"NOTIFY {CHANNEL}, 'p'")
        await until(lambda: not listener.quiet_since("p", mark))
        assert listener.quiet_since("q", mark)
        # More notifications than it remembers: it can no longer say "q" was not among them.
        await conn.execute(
            f"SELECT pg_notify('{CHANNEL}', 'n' || g) FROM generate_series(1, {_RECENT_KEPT}) g"
        )
        await until(lambda: not listener.quiet_since(f"n{_RECENT_KEPT}", mark))
        assert not listener.quiet_since("q", mark)
        # Another connection: what the lost one heard is gone with it.
        mark = listener.mark()
        assert listener.quiet_since("q", mark)
        await conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE query = $1 AND pid <> pg_backend_pid()",
            f'LISTEN "{CHANNEL}"',
        )
        await until(lambda: listener.mark() not in (None, mark))
        assert not listener.quiet_since("q", mark)
    finally:
        await conn.close()
        await listener.close()


async def test_a_wait_cancelled_as_its_event_is_set_ends_cancelled() -> None:
    """The cancellation of a service's loop (its close) must not be lost when a notification
    arrives at the same moment, or the close waits for ever (`asyncio.wait_for` on Python 3.11
    returned the event instead)."""
    event = asyncio.Event()
    waiting = asyncio.create_task(woken(event, 60))
    await asyncio.sleep(0)  # it waits
    event.set()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting


async def test_a_wait_says_whether_it_was_woken() -> None:
    event = asyncio.Event()
    assert not await woken(event, 0.01)
    asyncio.get_running_loop().call_later(0.01, event.set)
    assert await woken(event, 60)
