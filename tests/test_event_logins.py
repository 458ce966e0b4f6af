"""Every event names the database login that wrote it, as the database saw it (`session_user`):
not the actor the caller names, not a role it set. Auditors see it in `audit_events`, in a
call's story (library, CLI) and in the export; the hash covers it, so a login changed in the
journal, even by the table's owner, is found by `ledger verify`.

The writers are logins holding one role each (a worker has only `signoff_app` and the worker
KEK; a key administrator only `signoff_key_admin`); the database is this module's own.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest

from approvals import ApprovalStore
from ledger.audit.queries import call_story, story_summary
from ledger.calls.model import CallContext, CallStatus, Effect, ToolCall, ToolPolicy, call_stream
from ledger.calls.service import ToolLedger
from ledger.journal import Journal
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.logins import temporary_login
from ledger.store.settings import Settings
from tests.support.scratch import scratch_database

from .support.processes import TEST_KEK, kek_env, run_cli


@dataclass(frozen=True)
class Logins:
    owner: str
    worker: str
    key_admin: str
    auditor: str
    both: str  # member of signoff_app and signoff_key_admin, to SET ROLE between them


def login_of(url: str) -> str:
    name = urlsplit(url).username
    assert name
    return name


@pytest.fixture(scope="module")
async def logins(server_url: str) -> AsyncIterator[Logins]:
    async with scratch_database(server_url, prefix="signoff_logins") as owner:
        async with await Database.connect(owner) as db:  # the owner makes the data keys
            await KeyRing.open(db, LocalKek(TEST_KEK))
        async with (
            temporary_login(owner, "signoff_app") as worker,
            temporary_login(owner, "signoff_key_admin") as key_admin,
            temporary_login(owner, "signoff_auditor") as auditor,
            temporary_login(owner, "signoff_app", "signoff_key_admin") as both,
        ):
            yield Logins(owner, worker, key_admin, auditor, both)


async def worker_side(url: str) -> tuple[Database, KeyRing]:
    """A worker process: its login and the worker KEK, nothing of the reviewer side."""
    settings = Settings(database_url=url, kek=LocalKek(TEST_KEK), reviewer_kek=None)
    db = await Database.connect(url, pool_size=2, settings=settings)
    return db, await KeyRing.open(db, create_missing=False)


async def run_a_call(url: str, *, worker_id: str) -> tuple[str, str]:
    """A worker on `url` runs a read under `worker_id`; its run and call id."""
    db, ring = await worker_side(url)
    ledger = ToolLedger(db, ring, worker_id=worker_id)
    run_id, call_id = f"run-{uuid.uuid4().hex[:8]}", "lookup-1"

    async def tool(args: dict[str, Any], context: CallContext) -> str:
        return "found"

    try:
        outcome = await ledger.execute(
            ToolCall(run_id, call_id, "lookup", {"q": 1}), tool, ToolPolicy(Effect.READ)
        )
        assert outcome.status is CallStatus.SUCCEEDED
    finally:
        await ledger.close()
        await db.close()
    return run_id, call_id


async def test_a_workers_events_name_its_login_whatever_actor_it_gives(logins: Logins) -> None:
    """The worker names itself after the owner's login, and the approval's requester after a
    reviewer: the actors say what the caller said, the logins who wrote it."""
    worker = login_of(logins.worker)
    owner = login_of(logins.owner)
    run_id, call_id = await run_a_call(logins.worker, worker_id=owner)
    db, ring = await worker_side(logins.worker)
    store = ApprovalStore(db, ring)
    try:
        approval = await store.request(
            run_id=run_id, tool="refund", args={"amount": 1}, call_id="refund-1",
            requested_by="signoff_reviewer",
        )  # fmt: skip
        journal = Journal(db)
        calls = await journal.read_stream(call_stream(run_id, call_id))
        approvals = await journal.read_stream(f"approval:{approval.approval_id}")
    finally:
        await store.close()
        await db.close()
    assert [(e.type, e.actor, e.login) for e in calls] == [
        ("call.started", owner, worker),
        ("call.succeeded", owner, worker),
    ]
    assert [(e.type, e.actor, e.login) for e in approvals] == [
        ("approval.requested", "signoff_reviewer", worker)
    ]
    assert {e.tag_version for e in calls + approvals} == {3}


async def test_set_role_leaves_the_login_that_connected(logins: Logins) -> None:
    """A login that sets another role (or names the owner as actor) is still the login that
    connected; it cannot become another session user."""
    both = login_of(logins.both)
    stream = f"keys:login-{uuid.uuid4().hex[:8]}"
    conn = await asyncpg.connect(logins.both)
    try:
        await conn.execute("SET ROLE signoff_key_admin")
        assert await conn.fetchval("SELECT current_user") == "signoff_key_admin"
        await conn.fetchval(
            "SELECT signoff_append($1, 0, ARRAY['key.noted'], ARRAY['{}'::json], ARRAY[$2], NULL)",
            stream,
            login_of(logins.owner),
        )
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute(f'SET SESSION AUTHORIZATION "{login_of(logins.owner)}"')
    finally:
        await conn.close()
    async with await Database.connect(logins.owner) as db:
        (event,) = await Journal(db).read_stream(stream)
    assert (event.actor, event.login, event.tag_version) == (login_of(logins.owner), both, 3)


async def test_auditors_see_the_login_in_the_view_the_story_and_the_export(
    logins: Logins,
) -> None:
    worker = login_of(logins.worker)
    run_id, call_id = await run_a_call(logins.worker, worker_id="worker-7")
    stream = call_stream(run_id, call_id)
    conn = await asyncpg.connect(logins.auditor)
    try:
        rows = await conn.fetch(
            "SELECT type, actor, login, tag_version FROM audit_events WHERE stream_id = $1"
            " ORDER BY version",
            stream,
        )
    finally:
        await conn.close()
    assert [tuple(r) for r in rows] == [
        ("call.started", "worker-7", worker, 3),
        ("call.succeeded", "worker-7", worker, 3),
    ]

    async with await Database.connect(logins.owner) as db:
        story = story_summary(await call_story(db, run_id, call_id))
    assert [(e["type"], e["login"]) for e in story["events"]] == [
        ("call.started", worker),
        ("call.succeeded", worker),
    ]
    shown = await run_cli("ledger", "show", run_id, call_id, "--json", database_url=logins.owner)
    assert shown.code == 0, shown.stderr
    assert {e["login"] for e in json.loads(shown.stdout)["events"]} == {worker}
    text = await run_cli("ledger", "show", run_id, call_id, database_url=logins.owner)
    assert text.code == 0, text.stderr
    assert text.stdout.count(f"by worker-7 (login {worker})") == 2, text.stdout

    exported = await run_cli("ledger", "export", "--format", "jsonl", database_url=logins.owner)
    assert exported.code == 0, exported.stderr
    mine = [e for e in map(json.loads, exported.stdout.splitlines()) if e["stream_id"] == stream]
    assert [(e["login"], e["tag_version"]) for e in mine] == [(worker, 3), (worker, 3)]


async def tamper(url: str, *statements: str) -> None:
    """What only the table's owner can do: change rows with the append-only trigger off."""
    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            await conn.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
            for statement in statements:
                await conn.execute(statement)
            await conn.execute("ALTER TABLE events ENABLE TRIGGER events_append_only")
    finally:
        await conn.close()


async def test_a_login_changed_in_the_journal_is_found_by_ledger_verify(
    server_url: str,
) -> None:
    """Put the blame on another login, or erase it by calling the event one of tag 2 (which
    has none): either way the hash no longer matches, and verify exits 1 naming the stream."""
    async with scratch_database(server_url, prefix="signoff_logins") as owner:
        async with await Database.connect(owner) as db:
            await KeyRing.open(db, LocalKek(TEST_KEK))
        async with temporary_login(owner, "signoff_app") as worker:
            blamed = await run_a_call(worker, worker_id="w")
            erased = await run_a_call(worker, worker_id="w")
        clean = await run_cli("ledger", "verify", database_url=owner, env=kek_env())
        assert clean.code == 0, clean.stdout + clean.stderr
        for (run_id, call_id), change in (
            (blamed, "login = 'signoff_reviewer'"),
            (erased, "login = NULL, tag_version = 2"),
        ):
            stream = call_stream(run_id, call_id)
            await tamper(
                owner,
                f"UPDATE events SET {change} WHERE stream_id = '{stream}' AND version = 1",
            )
        result = await run_cli("ledger", "verify", database_url=owner, env=kek_env())
        assert result.code == 1, result.stdout + result.stderr
        said = result.stdout + result.stderr
        for run_id, call_id in (blamed, erased):
            stream = call_stream(run_id, call_id)
            assert f"hash chain: stream '{stream}' version 1 position" in said, said
