"""The rules on the journal's and projections' columns hold for every writer, the owner too:
they are domains, checked by the database whoever inserts or updates."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
import pytest

from approvals import ApprovalStore
from ledger.calls.model import CallContext, ToolCall
from ledger.calls.service import ToolLedger
from ledger.store import Database

_EVENT = (
    "INSERT INTO events (txid, stream_id, version, type, data, actor, recorded_at, hash, login)"
    " VALUES (pg_current_xact_id(), $1, $2, $3, '{}', $4, now(), $5, $6)"
)
_GOOD = {
    "stream_id": "rules:ok",
    "version": 1,
    "type": "noted",
    "actor": "a",
    "hash": bytes(32),
    "login": "signoff_app",
}
_BAD_EVENTS = [
    {"stream_id": ""},
    {"stream_id": "s" * 201},
    {"version": 0},
    {"type": ""},
    {"type": "t" * 101},
    {"actor": ""},
    {"actor": "a" * 201},
    {"hash": bytes(31)},
    {"login": None},  # every event of tag 3, the default, names its login
]


@pytest.mark.parametrize("bad", _BAD_EVENTS, ids=lambda bad: ",".join(bad))
async def test_an_event_out_of_its_columns_rules_is_refused(
    db: Database, bad: dict[str, object]
) -> None:
    values = _GOOD | {"stream_id": f"rules:{uuid.uuid4().hex[:8]}"} | bad
    async with db.connection() as conn:
        with pytest.raises(asyncpg.CheckViolationError):
            await conn.execute(_EVENT, *values.values())


async def test_an_event_within_the_rules_is_written(db: Database) -> None:
    values = _GOOD | {"stream_id": f"rules:{uuid.uuid4().hex[:8]}"}
    async with db.connection() as conn, conn.transaction():
        await conn.execute(_EVENT, *values.values())
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM events WHERE stream_id = $1", values["stream_id"]
            )
            == 1
        )


async def test_a_call_or_approval_status_out_of_its_list_is_refused(
    db: Database, ledger: ToolLedger, store: ApprovalStore
) -> None:
    run_id = f"rules-{uuid.uuid4().hex[:8]}"

    async def tool(args: dict[str, Any], context: CallContext) -> str:
        return "done"

    await ledger.execute(ToolCall(run_id, "c1", "noop", {}), tool)
    approval = await store.request(
        run_id=run_id, tool="refund", args={"n": 1}, call_id="c2", requested_by="agent"
    )
    refused = [
        ("UPDATE tool_calls SET status = 'finished' WHERE run_id = $1", run_id),
        ("UPDATE tool_calls SET effect = 'write' WHERE run_id = $1", run_id),
        ("UPDATE approvals SET status = 'maybe' WHERE approval_id = $1", approval.approval_id),
    ]
    async with db.connection() as conn:
        for statement, key in refused:
            with pytest.raises(asyncpg.CheckViolationError):
                await conn.execute(statement, key)
        assert await conn.fetchval("SELECT status FROM tool_calls WHERE run_id = $1", run_id) == (
            "succeeded"
        )
