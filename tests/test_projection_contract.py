"""The projection contract, run against every projection: approvals, tool calls, reviewers.

`ProjectionContract` holds the tests; each subclass is the factory hook (`create_projection`,
`make_commit`, `next_commit`, `edit`) for one projection. Each class gets a database of its own,
and its tests run in order: the last one rebuilds everything the others wrote.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any, ClassVar

import pytest

from approvals.model import ApprovalPolicy, DecisionKind, Review, args_digest, binding_of
from approvals.projection import APPROVALS, stream_of
from approvals.reviewers import REVIEWERS
from ledger.calls.projection import CALLS
from ledger.errors import ProjectionError, UnknownEventType, VersionConflict
from ledger.journal import Journal, NewEvent
from ledger.journal.projection import Fact, Projection, commit, facts, fold, verify_projection
from ledger.keys import KeyRing, LocalKek
from ledger.keys.values import as_text, seal_value
from ledger.store import Database
from tests.support.scratch import scratch_database

from .support.processes import TEST_KEK

Commit = tuple[str, list[NewEvent], dict[str, Any]]  # stream, events, extra named values


def _at() -> str:
    return datetime.now(UTC).isoformat()


@pytest.fixture(scope="class")
async def env(server_url: str) -> AsyncIterator[tuple[Database, KeyRing]]:
    """A database for one projection's tests, and its key ring."""
    async with (
        scratch_database(server_url, prefix="signoff_test") as url,
        await Database.connect(url) as db,
    ):
        yield db, await KeyRing.open(db, LocalKek(TEST_KEK))


class ProjectionContract:
    """What every projection promises. Subclasses say how to make its commits."""

    edit: ClassVar[str]  # an UPDATE's SET clause that changes a row behind the journal's back

    def create_projection(self) -> Projection[Any]:
        raise NotImplementedError

    def make_commit(self, ring: KeyRing) -> Commit:
        """The first commit of a new stream."""
        raise NotImplementedError

    def next_commit(self, ring: KeyRing, record: Any) -> Commit:
        """A later commit of `record`'s stream."""
        raise NotImplementedError

    # -- the harness ----------------------------------------------------------------------

    def _where(self, projection: Projection[Any], record: Any) -> tuple[str, list[Any]]:
        row = projection.to_row(record)
        clause = " AND ".join(f"{k} = ${n}" for n, k in enumerate(projection.key, start=1))
        return clause, [row[k] for k in projection.key]

    async def _row(self, db: Database, projection: Projection[Any], record: Any) -> Any:
        where, key = self._where(projection, record)
        async with db.connection() as conn:
            row = await conn.fetchrow(
                f"SELECT {projection.columns} FROM {projection.table} WHERE {where}", *key
            )
        return None if row is None else projection.from_row(row)

    async def _committed(self, db: Database, ring: KeyRing) -> Any:
        projection = self.create_projection()
        stream, events, values = self.make_commit(ring)
        async with db.connection() as conn:
            record = await commit(
                conn, projection, stream, None, events, expected_version=0, **values
            )
        assert record is not None
        return record

    async def _next(self, db: Database, record: Any, step: Commit) -> Any:
        """Commit `step` onto `record` as read, on a connection of its own (None: not written)."""
        stream, events, values = step
        async with db.connection() as conn:
            return await commit(
                conn,
                self.create_projection(),
                stream,
                record,
                events,
                expected_version=record.version,
                **values,
            )

    # -- the contract ---------------------------------------------------------------------

    async def test_the_row_written_equals_the_fold_of_the_commits_events(
        self, env: tuple[Database, KeyRing]
    ) -> None:
        db, ring = env
        projection = self.create_projection()
        record = await self._committed(db, ring)
        stream = projection.stream_of(record)
        recorded = await Journal(db).read_stream(stream)
        folded = fold(
            projection, (Fact(stream, e.version, e.type, e.data, e.actor) for e in recorded)
        )
        assert await self._row(db, projection, record) == record == folded

        step = self.next_commit(ring, record)
        stream, events, _ = step
        later = await self._next(db, record, step)
        assert later is not None and later.version == record.version + len(events)
        assert await self._row(db, projection, record) == later
        assert later == fold(projection, facts(stream, events, record.version), record)

    async def test_a_stale_version_writes_neither_the_events_nor_the_row(
        self, env: tuple[Database, KeyRing]
    ) -> None:
        """The row has moved on from the version the caller read: nothing is written."""
        db, ring = env
        projection = self.create_projection()
        journal = Journal(db)
        stale = await self._committed(db, ring)
        step = self.next_commit(ring, stale)
        stale_stream = step[0]
        moved = await self._next(db, stale, step)
        again = await self._next(db, stale, step)
        assert moved is not None and again is None
        assert await journal.stream_version(stale_stream) == moved.version
        assert await self._row(db, projection, stale) == moved

    async def test_the_append_and_the_row_write_are_one_statement(
        self, fresh_database_url: str
    ) -> None:
        """The stream has moved on though the row has not: the append fails, and the row write
        is undone with it, outside any transaction (on a database of its own: the intruding
        event stays in the journal)."""
        async with await Database.connect(fresh_database_url) as db:
            ring = await KeyRing.open(db, LocalKek(TEST_KEK))
            projection, journal = self.create_projection(), Journal(db)
            record = await self._committed(db, ring)
            step = self.next_commit(ring, record)
            stream = step[0]
            intruder = NewEvent("intruder.appended", {"at": _at()}, actor="test")
            await journal.append(stream, [intruder], expected_version=record.version)
            with pytest.raises(VersionConflict):
                await self._next(db, record, step)
            assert await journal.stream_version(stream) == record.version + 1
            assert await self._row(db, projection, record) == record

    async def test_an_unknown_event_type_raises_the_typed_error_and_writes_nothing(
        self, env: tuple[Database, KeyRing]
    ) -> None:
        db, ring = env
        projection = self.create_projection()
        record = await self._committed(db, ring)
        stream = projection.stream_of(record)
        unknown = Fact(stream, record.version + 1, "mystery.happened", {"at": _at()}, "test")
        with pytest.raises(UnknownEventType) as raised:
            projection.apply(record, unknown)
        assert raised.value.event_type == "mystery.happened" and raised.value.stream_id == stream
        first = self.make_commit(ring)[1][0]
        with pytest.raises(ProjectionError):
            projection.apply(None, Fact(stream, 1, "mystery.happened", first.data, "test"))
        async with db.connection() as conn:
            with pytest.raises(UnknownEventType):
                await commit(
                    conn,
                    projection,
                    stream,
                    record,
                    [NewEvent("mystery.happened", {"at": _at()}, actor="test")],
                    expected_version=record.version,
                )
        assert await Journal(db).stream_version(stream) == record.version
        assert await self._row(db, projection, record) == record

    async def test_verify_projection_names_an_edited_row_and_a_missing_row(
        self, env: tuple[Database, KeyRing]
    ) -> None:
        db, ring = env
        projection = self.create_projection()
        record = await self._committed(db, ring)
        assert await verify_projection(db, projection) == []
        where, key = self._where(projection, record)
        label = projection.label(record)
        async with db.connection() as conn:  # the owner, behind the journal's back
            saved = await conn.fetchval(
                f"SELECT row_to_json(t)::text FROM {projection.table} t WHERE {where}", *key
            )
            await conn.execute(f"UPDATE {projection.table} SET {self.edit} WHERE {where}", *key)
        problems = await verify_projection(db, projection)
        assert len(problems) == 1 and problems[0].startswith(f"{label}: table "), problems

        async with db.connection() as conn:
            await conn.execute(f"DELETE FROM {projection.table} WHERE {where}", *key)
        assert await verify_projection(db, projection) == [
            f"{label}: in the journal, not in the table"
        ]
        async with db.connection() as conn:
            await conn.execute(
                f"INSERT INTO {projection.table}"
                f" SELECT * FROM json_populate_record(NULL::{projection.table}, $1::json)",
                saved,
            )
        assert await verify_projection(db, projection) == []

    async def test_a_rebuild_after_all_of_the_above_equals_the_live_table(
        self, env: tuple[Database, KeyRing]
    ) -> None:
        db, ring = env
        projection = self.create_projection()
        record = await self._committed(db, ring)
        assert await self._next(db, record, self.next_commit(ring, record)) is not None
        assert await verify_projection(db, projection) == []
        async with db.connection() as conn:
            rows = await conn.fetch(f"SELECT {projection.columns} FROM {projection.table}")
        assert len(rows) >= 5  # one or two commits from each test above
        journal = Journal(db)
        for live in map(projection.from_row, rows):
            stream = projection.stream_of(live)
            recorded = await journal.read_stream(stream)
            rebuilt = fold(
                projection, (Fact(stream, e.version, e.type, e.data, e.actor) for e in recorded)
            )
            assert rebuilt == live


class TestApprovalProjection(ProjectionContract):
    edit = "decided_by = '{mallory}'"

    def create_projection(self) -> Projection[Any]:
        return APPROVALS

    def make_commit(self, ring: KeyRing) -> Commit:
        approval_id = f"apr-{uuid.uuid4().hex}"
        run, call = f"run-{uuid.uuid4().hex[:8]}", "c1"
        args = {"amount": 10}
        digest = args_digest(ring, args)
        requested = {
            "run_id": run,
            "thread_id": None,
            "tool": "refund",
            "kind": "tool_call",
            "call_id": call,
            "args_digest": digest,
            "args_sealed": as_text(seal_value(ring, stream_of(approval_id), "args", "{}")),
            "binding": binding_of(run, "refund", "tool_call", digest, call, approval_id),
            "policy": ApprovalPolicy().to_json(),
            "thread_config": None,
            "requested_at": _at(),
            "expires_at": None,
        }
        events = [NewEvent("approval.requested", requested, actor="agent")]
        return stream_of(approval_id), events, {}

    def next_commit(self, ring: KeyRing, record: Any) -> Commit:
        review = Review("bob", DecisionKind.APPROVE, datetime.now(UTC))
        decided = review.to_json() | {"final": True, "decided_by": ["bob"]}
        consumed = {"task_run_id": "task-1", "at": _at()}
        events = [
            NewEvent("approval.decided", decided, actor="bob"),
            NewEvent("approval.consumed", consumed, actor="task-1"),
        ]
        return stream_of(record.approval_id), events, {}


# The lease token of the one worker that starts and finishes these calls.
LEASE_TOKEN = b"lease-token-of-worker-1"


class TestCallProjection(ProjectionContract):
    edit = "attempts = 9"

    def create_projection(self) -> Projection[Any]:
        return CALLS

    def make_commit(self, ring: KeyRing) -> Commit:
        run, call = f"run-{uuid.uuid4().hex[:8]}", "c1"
        stream = f"call:{run}/{call}"
        started = {
            "run_id": run,
            "call_id": call,
            "tool": "lookup",
            "effect": "read",
            "once_per_run": False,
            "request_digest": "1" * 64,
            "args_digest": "1" * 64,
            "idempotency_key": f"{run}/0/{call}",
            "approval_id": None,
            "approval_stream": None,
            "approved_by": [],
            "worker_id": "worker-1",
            "at": _at(),
        }
        values = {
            "args_sealed": seal_value(ring, stream, "args", "{}"),
            "result_sealed": None,
            "lease_seconds": 30.0,
            "lease_token": LEASE_TOKEN,
        }
        return stream, [NewEvent("call.started", started, actor="worker-1")], values

    def next_commit(self, ring: KeyRing, record: Any) -> Commit:
        stream = CALLS.stream_of(record)
        data = {"attempt": record.attempts, "result_digest": "2" * 64, "at": _at()}
        values = {
            "result_sealed": seal_value(ring, stream, "result", "null"),
            "lease_seconds": 30.0,
            "lease_token": LEASE_TOKEN,
        }
        return stream, [NewEvent("call.succeeded", data, actor="worker-1")], values


class TestReviewerProjection(ProjectionContract):
    edit = "groups = '{leads}'"

    def create_projection(self) -> Projection[Any]:
        return REVIEWERS

    def make_commit(self, ring: KeyRing) -> Commit:
        stream = f"reviewer:r-{uuid.uuid4().hex[:12]}"
        added = {"groups": ["support"], "at": _at()}
        return stream, [NewEvent("reviewer.added", added, actor="admin")], {}

    def next_commit(self, ring: KeyRing, record: Any) -> Commit:
        stream = REVIEWERS.stream_of(record)
        events = [
            NewEvent("reviewer.groups_changed", {"groups": ["finance"], "at": _at()}, "admin"),
            NewEvent("reviewer.removed", {"at": _at()}, actor="admin"),
        ]
        return stream, events, {}
