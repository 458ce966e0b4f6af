"""`signoff_commit_call`, the one write of a tool call's steps, called as the ledger calls it:
what it writes, and each refusal with its code."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest

from ledger.journal import Journal
from ledger.store import Database

from .support.scratch import scratch_database


def new_call(**changes: Any) -> dict[str, Any]:
    run_id, call_id = f"commit-{uuid.uuid4().hex[:8]}", "c/1"
    step = {
        "p_insert": True,
        "p_run_id": run_id,
        "p_call_id": call_id,
        "p_tool": "refund",
        "p_effect": "single_attempt",
        "p_once_per_run": False,
        "p_request_digest": "r",
        "p_args_digest": "a",
        "p_idempotency_key": "k",
        "p_approval_id": None,
        "p_status": "running",
        "p_attempts": 1,
        "p_worker_id": "w",
        "p_result_digest": None,
        "p_resolved_by": None,
        "p_started_at": datetime.now(UTC),
        "p_finished_at": None,
        "p_approved_by": [],
        "p_approval_stream": None,
        "p_args_sealed": b"sealed",
        "p_result_sealed": None,
        "p_lease_seconds": 30.0,
        "p_lease_token": b"lease-token-of-worker-w",
        "p_tally": None,
        "p_stream": f"call:{run_id}/c%2F1",
        "p_expected": 0,
        "p_types": ["call.started"],
        "p_data": ['{"attempt": 1}'],
        "p_actors": ["w"],
        "p_notify": None,
    }
    return step | changes


def finish(call: dict[str, Any], **changes: Any) -> dict[str, Any]:
    step = call | {
        "p_insert": False,
        "p_status": "succeeded",
        "p_expected": 1,
        "p_types": ["call.succeeded"],
        "p_data": ['{"result": 1}'],
    }
    return step | changes


async def commit(conn: asyncpg.Connection, step: dict[str, Any]) -> str | None:
    """What the function returned: None when it wrote nothing, else the position and hash of
    the last event it appended (json text)."""
    # Named arguments: the order of `new_call` need not be the function's.
    named = ", ".join(f"{name} => ${i}" for i, name in enumerate(step, 1))
    written: str | None = await conn.fetchval(
        f"SELECT signoff_commit_call({named})", *step.values()
    )
    return written


@pytest.fixture(scope="module")
async def commit_url(server_url: str) -> AsyncIterator[str]:
    """A database of this module's own: the events written here are not a worker's (their data
    lacks what a worker records), which the rebuilds of the shared database would report."""
    async with scratch_database(server_url, prefix="signoff_test") as url:
        yield url


@pytest.fixture
async def conn(commit_url: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(commit_url)
    try:
        yield connection
    finally:
        await connection.close()


async def test_a_call_starts_and_finishes_on_a_chain_that_verifies(
    conn: asyncpg.Connection, commit_url: str
) -> None:
    call = new_call()
    started = await commit(conn, call)
    assert started is not None
    two = finish(
        call,
        p_types=["call.failed", "call.retried"],
        p_status="running",
        p_data=['{"error": "x"}', '{"attempt": 2}'],
        p_actors=["w", "w"],
    )
    after_two = await commit(conn, two)
    last = await commit(conn, finish(call, p_expected=3))
    row = await conn.fetchrow(
        "SELECT status, version, lease_until FROM tool_calls WHERE run_id = $1",
        call["p_run_id"],
    )
    assert tuple(row) == ("succeeded", 4, None)
    async with await Database.connect(commit_url) as db:
        journal = Journal(db)
        events = await journal.read_stream(call["p_stream"])
        assert [e.type for e in events] == [
            "call.started",
            "call.failed",
            "call.retried",
            "call.succeeded",
        ]
        assert (await journal.verify()).ok
    # Each write names the last event it appended: what a call's trace points at.
    for returned, event in ((started, events[0]), (after_two, events[2]), (last, events[3])):
        assert returned is not None
        assert json.loads(returned) == {"position": event.position, "hash": event.hash.hex()}


async def test_a_call_already_started_or_a_step_off_its_row_writes_nothing(
    conn: asyncpg.Connection,
) -> None:
    call = new_call()
    assert await commit(conn, call) is not None
    assert await commit(conn, call) is None  # started already
    assert await commit(conn, finish(call, p_expected=2)) is None  # the row is at 1
    assert await commit(conn, finish(call)) is not None
    assert await commit(conn, finish(call, p_expected=2)) is None  # finished: never again
    versions = await conn.fetchval(
        "SELECT array_agg(version ORDER BY version) FROM events WHERE stream_id = $1",
        call["p_stream"],
    )
    assert versions == [1, 2]


@pytest.mark.parametrize(
    ("changes", "sqlstate", "words"),
    [
        ({"p_actors": []}, "22023", "as many types, data and actors"),
        ({"p_expected": -1}, "22023", "as many types, data and actors"),
        ({"p_status": "succeeded"}, "SG422", "leaves call"),
        ({"p_types": ["call.noted"]}, "SG422", "leaves call"),
        ({"p_stream": "call:elsewhere"}, "SG422", "starts its own stream"),
        ({"p_expected": 1}, "SG422", "starts its own stream"),
        ({"p_approval_id": "a-1"}, "SG422", "does not carry what approval"),
    ],
)
async def test_a_new_call_out_of_the_rules_is_refused(
    conn: asyncpg.Connection, changes: dict[str, Any], sqlstate: str, words: str
) -> None:
    call = new_call(**changes)
    with pytest.raises(asyncpg.PostgresError) as refused:
        await commit(conn, call)
    assert refused.value.sqlstate == sqlstate
    assert words in str(refused.value)
    found = await conn.fetchval(
        "SELECT count(*) FROM tool_calls WHERE run_id = $1", call["p_run_id"]
    )
    assert found == 0


async def test_a_step_whose_stream_is_not_where_its_row_is_is_refused(
    conn: asyncpg.Connection,
) -> None:
    call = new_call()
    await commit(conn, call)
    # Only the owner can move a row; the stream stays at version 1.
    await conn.execute("UPDATE tool_calls SET version = 2 WHERE run_id = $1", call["p_run_id"])
    with pytest.raises(asyncpg.PostgresError) as refused:
        await commit(conn, finish(call, p_expected=2))
    assert refused.value.sqlstate == "SG409"
    assert "is at version 1, expected 2" in str(refused.value)


async def test_a_step_in_a_savepoint_is_refused(conn: asyncpg.Connection) -> None:
    call = new_call()
    async with conn.transaction():
        await conn.execute("SELECT pg_current_xact_id()")
        with pytest.raises(asyncpg.PostgresError) as refused:
            async with conn.transaction():  # a savepoint
                await commit(conn, call)
        assert refused.value.sqlstate == "SG425"
