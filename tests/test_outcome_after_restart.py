"""A finished tool's outcome meets a database restart: the worker holding the result tries the
write again, with backoff, while its lease runs, and the outcome is recorded once the database
is back; only a database down past the lease leaves the call to be settled as `outcome_unknown`.

The restarts are real: a private embedded PostgreSQL server, stopped while the tool runs.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ledger.calls import CallContext, CallStatus, Effect, ToolCall, ToolLedger, ToolPolicy
from ledger.calls.model import call_stream
from ledger.errors import DatabaseUnavailable
from ledger.journal import Journal
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database, migrate
from ledger.store.embedded import ensure_server, stop_server

from .support.embedded_homes import private_home
from .support.processes import TEST_KEK
from .support.until import until

WRITE = ToolPolicy(Effect.SINGLE_ATTEMPT)
RESULT = {"refunded": "A-1042", "amount": 120}
RETRYING = "recording the outcome failed; retrying while the lease runs"
GAVE_UP = "outcome not recorded: the database stayed unreachable while the lease ran"


class Records(logging.Handler):
    """The records logged to the `signoff` loggers while it is attached."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def with_message(self, text: str) -> list[logging.LogRecord]:
        return [r for r in self.records if r.getMessage().startswith(text)]


@dataclass
class Server:
    home: Path
    url: str
    db: Database
    ring: KeyRing
    logs: Records

    async def stop(self) -> None:
        await asyncio.to_thread(stop_server, self.home)

    async def start(self) -> None:
        assert await asyncio.to_thread(ensure_server, self.home) == self.url


@pytest.fixture
def home() -> Iterator[Path]:
    with private_home() as path:
        yield path


@pytest.fixture
async def server(home: Path) -> AsyncIterator[Server]:
    url = await asyncio.to_thread(ensure_server, home)
    await asyncio.to_thread(migrate.upgrade, url)
    db = await Database.connect(url, pool_size=2)
    ring = await KeyRing.open(db, LocalKek(TEST_KEK))
    logs, logger = Records(), logging.getLogger("signoff")
    logger.addHandler(logs)
    try:
        yield Server(home, url, db, ring, logs)
    finally:
        logger.removeHandler(logs)
        await db.close()


def refund() -> ToolCall:
    return ToolCall(f"restart-{uuid.uuid4().hex[:8]}", "c1", "refund", {"order": "A-1042"})


async def test_an_outcome_is_recorded_once_the_restarted_database_is_back(server: Server) -> None:
    """The outcome's write used to fail once and give up: the call became `outcome_unknown`
    for a person to resolve, though the worker held the result."""
    ledger = ToolLedger(server.db, server.ring, lease_seconds=30.0)
    call = refund()
    runs: list[int] = []

    async def refund_tool(args: dict[str, Any], context: CallContext) -> dict[str, Any]:
        runs.append(context.attempt)
        await server.stop()  # the database goes down while the tool runs
        return RESULT

    try:
        running = asyncio.create_task(ledger.execute(call, refund_tool, WRITE))
        await until(
            lambda: running.done() or bool(server.logs.with_message(RETRYING)),
            60,
            "the worker retrying the outcome's write",
        )
        assert not running.done(), running
        await server.start()
        outcome = await asyncio.wait_for(running, 60)
        assert (outcome.status, outcome.result, outcome.replayed) == (
            CallStatus.SUCCEEDED,
            RESULT,
            False,
        )
        assert runs == [1]
        recorded = await ledger.outcome(call.run_id, call.call_id)
        assert (recorded.status, recorded.result, recorded.replayed) == (
            CallStatus.SUCCEEDED,
            RESULT,
            True,
        )
        events = await Journal(server.db).read_stream(call_stream(call.run_id, call.call_id))
        assert [e.type for e in events] == ["call.started", "call.succeeded"]
        # Logged with the call's ids, never with its result.
        retried = server.logs.with_message(RETRYING)
        assert all(
            (getattr(r, "run_id", None), getattr(r, "call_id", None)) == (call.run_id, call.call_id)
            for r in retried
        )
        for record in server.logs.records:
            assert "A-1042" not in f"{record.getMessage()} {record.__dict__}"
    finally:
        await ledger.close()


async def test_a_database_down_past_the_lease_leaves_the_call_to_be_settled(
    server: Server,
) -> None:
    """Bounded: the worker stops trying when its lease has run out, raises, and the call is
    settled as its effect allows once the database is back."""
    ledger = ToolLedger(server.db, server.ring, lease_seconds=1.0, poll_interval=0.05)
    call = refund()

    async def refund_tool(args: dict[str, Any], context: CallContext) -> dict[str, Any]:
        await server.stop()
        return RESULT

    try:
        with pytest.raises(DatabaseUnavailable):
            await asyncio.wait_for(ledger.execute(call, refund_tool, WRITE), 60)
        # Tried again while the lease ran (none, if stopping the server took the whole lease).
        assert server.logs.with_message(GAVE_UP)
        await server.start()

        async def lapsed() -> bool:
            async with server.db.connection() as conn:
                return bool(await conn.fetchval("SELECT lease_until < now() FROM tool_calls"))

        await until(lapsed, what="the lease lapsed by the server's clock")
        assert await ledger.reap() == 1
        settled = await ledger.outcome(call.run_id, call.call_id)
        assert settled.status is CallStatus.OUTCOME_UNKNOWN
    finally:
        await ledger.close()
