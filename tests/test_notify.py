"""The listener's certainty that a payload was not notified (`Listener.mark`, `quiet_since`):
only on the connection the mark was taken on, and only within what it remembers."""

from __future__ import annotations

import asyncpg

from ledger.store.notify import _RECENT_KEPT, Listener

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
