"""The journal: appends race safely, readers never skip, tampering is found, bad input fails."""

from __future__ import annotations

import asyncio
import json
import math
import uuid

import asyncpg
import pytest

from ledger import InvalidEvent, VersionConflict
from ledger.journal import Journal, NewEvent
from ledger.journal.journal import MAX_DATA_BYTES
from ledger.store import Database

from .support.processes import finish, run_cli, start_worker


def new_stream() -> str:
    return f"test:{uuid.uuid4().hex}"


def event(n: int = 0) -> NewEvent:
    return NewEvent("test.happened", {"n": n}, actor="tester")


async def test_append_then_read_stream_round_trips(journal: Journal) -> None:
    stream = new_stream()
    first = await journal.append(stream, [event(1)], expected_version=0)
    second = await journal.append(stream, [event(2), event(3)], expected_version=1)
    assert (first.version, second.version) == (1, 3)
    assert second.positions[0] < second.positions[1]
    events = await journal.read_stream(stream)
    assert [(e.version, e.data["n"]) for e in events] == [(1, 1), (2, 2), (3, 3)]
    assert [e.position for e in events] == [*first.positions, *second.positions]


async def test_fifty_racing_appenders_one_wins_each_version(database_url: str) -> None:
    stream = new_stream()
    async with await Database.connect(database_url, pool_size=50) as db:
        journal = Journal(db)
        for version in range(3):

            async def attempt(i: int, version: int = version) -> bool:
                try:
                    await journal.append(stream, [event(i)], expected_version=version)
                except VersionConflict:
                    return False
                return True

            results = await asyncio.gather(*(attempt(i) for i in range(50)))
            assert results.count(True) == 1, f"version {version + 1}: {results.count(True)} won"
            assert await journal.stream_version(stream) == version + 1


async def test_version_conflict_reports_actual_version(journal: Journal) -> None:
    stream = new_stream()
    await journal.append(stream, [event(), event()], expected_version=0)
    with pytest.raises(VersionConflict) as caught:
        await journal.append(stream, [event()], expected_version=1)
    assert (caught.value.expected_version, caught.value.actual_version) == (1, 2)
    assert await journal.stream_version(stream) == 2


async def test_tailing_reader_sees_every_commit_of_eight_processes_once(
    database_url: str, journal: Journal
) -> None:
    start = 0
    async for e in journal.read_all():
        start = e.position
    seen: list[int] = []
    committed: set[int] = set()
    for round_ in range(3):
        workers = [
            await start_worker("append-many", database_url, str(round_ * 8 + w), "60", "12")
            for w in range(8)
        ]
        outputs = asyncio.gather(*(finish(w) for w in workers))
        after = seen[-1] if seen else start
        while not outputs.done():
            async for e in journal.read_all(after=after):
                seen.append(e.position)
                after = e.position
            await asyncio.sleep(0.005)
        for output in await outputs:
            committed.update(json.loads(output))
        # What committed after the last poll: readers see it once the oldest transaction
        # running anywhere on the server (other databases included) has ended.
        deadline = asyncio.get_running_loop().time() + 30
        while not committed <= set(seen) and asyncio.get_running_loop().time() < deadline:
            async for e in journal.read_all(after=after):
                seen.append(e.position)
                after = e.position
            await asyncio.sleep(0.01)
        assert len(seen) == len(set(seen)), "an event was read twice"
        assert set(seen) == committed, (
            f"round {round_}: missed {sorted(committed - set(seen))[:10]}, "
            f"extra {sorted(set(seen) - committed)[:10]}"
        )
    # The order a tailing reader saw is the order every later reader sees.
    again = [e.position async for e in journal.read_all(after=start)]
    assert again == seen


async def test_read_all_refuses_unknown_position(journal: Journal) -> None:
    with pytest.raises(InvalidEvent, match="no event at position"):
        async for _ in journal.read_all(after=10**12):
            pass


@pytest.mark.parametrize(
    ("stream", "events", "expected_version", "message"),
    [
        ("s", [NewEvent("t", {"a": {1, 2}}, actor="x")], 0, "not JSON"),
        ("s", [NewEvent("t", {"a": b"bytes"}, actor="x")], 0, "not JSON"),
        ("s", [NewEvent("t", {"a": math.nan}, actor="x")], 0, "not JSON"),
        ("s", [NewEvent("t", {"a": "\ud800"}, actor="x")], 0, "not JSON"),
        ("s", [NewEvent("t", ["a list"], actor="x")], 0, "JSON object"),  # type: ignore[arg-type]
        ("s", [NewEvent("t", {"a": "x" * MAX_DATA_BYTES}, actor="x")], 0, "more than the limit"),
        ("", [NewEvent("t", {}, actor="x")], 0, "stream id must be a non-empty string"),
        ("s", [NewEvent("t", {}, actor="x")], -1, "must be >= 0"),
        ("s", [NewEvent("t", {}, actor="")], 0, "actor must be"),
        ("s", [NewEvent("", {}, actor="x")], 0, "type must be"),
        ("s\x00", [NewEvent("t", {}, actor="x")], 0, "control characters"),
        ("s", [], 0, "at least one event"),
    ],
)
async def test_bad_input_is_refused_and_nothing_written(
    journal: Journal,
    db: Database,
    stream: str,
    events: list[NewEvent],
    expected_version: int,
    message: str,
) -> None:
    async with db.connection() as conn:
        before = await conn.fetchval("SELECT count(*) FROM events")
    unique_stream = f"{stream}{uuid.uuid4().hex}" if stream else stream
    with pytest.raises(InvalidEvent, match=message):
        await journal.append(unique_stream, events, expected_version=expected_version)
    async with db.connection() as conn:
        assert await conn.fetchval("SELECT count(*) FROM events") == before


async def test_a_failed_batch_writes_nothing(journal: Journal) -> None:
    stream = new_stream()
    with pytest.raises(InvalidEvent):
        await journal.append(
            stream, [event(1), NewEvent("t", {"x": object()}, actor="x")], expected_version=0
        )
    assert await journal.stream_version(stream) == 0


async def test_the_database_refuses_changes_to_events(database_url: str, journal: Journal) -> None:
    stream = new_stream()
    await journal.append(stream, [event()], expected_version=0)
    conn = await asyncpg.connect(database_url)
    try:
        for statement in (
            "UPDATE events SET actor = 'mallory' WHERE stream_id = $1",
            "DELETE FROM events WHERE stream_id = $1",
        ):
            with pytest.raises(asyncpg.PostgresError) as caught:
                await conn.execute(statement, stream)
            assert caught.value.sqlstate == "SG403", "a superuser is stopped by the trigger"
        with pytest.raises(asyncpg.PostgresError) as truncated:
            await conn.execute("TRUNCATE events")
        assert truncated.value.sqlstate == "SG403"
        # The application role has no right to change events in the first place.
        async with conn.transaction():
            await conn.execute("SET LOCAL ROLE signoff_app")
            assert await conn.fetchval("SELECT count(*) FROM events WHERE stream_id = $1", stream)
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute("DELETE FROM events WHERE stream_id = $1", stream)
        async with conn.transaction():
            await conn.execute("SET LOCAL ROLE signoff_app")
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute("UPDATE events SET actor = 'x' WHERE stream_id = $1", stream)
    finally:
        await conn.close()
    assert len(await journal.read_stream(stream)) == 1


async def test_verify_names_the_tampered_event(fresh_database_url: str) -> None:
    async with await Database.connect(fresh_database_url) as db:
        journal = Journal(db)
        streams = [new_stream() for _ in range(3)]
        for stream in streams:
            for n in range(4):
                await journal.append(stream, [event(n)], expected_version=n)
        assert (await journal.verify()).ok
        target = (await journal.read_stream(streams[1]))[2]
        conn = await asyncpg.connect(fresh_database_url)
        try:  # as a superuser: switch the guard off and change one byte of the payload
            await conn.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
            await conn.execute(
                "UPDATE events SET data = replace(data::text, '2', '7')::json WHERE position = $1",
                target.position,
            )
            await conn.execute("ALTER TABLE events ENABLE TRIGGER events_append_only")
        finally:
            await conn.close()
        report = await journal.verify()
    assert not report.ok
    assert report.events == 12
    assert report.first_bad is not None
    assert (report.first_bad.stream_id, report.first_bad.version) == (streams[1], 3)
    assert report.first_bad.position == target.position
    assert "hash differs" in report.first_bad.problem
    assert len(report.bad) == 1, "only the altered event is reported"

    cli = await run_cli("ledger", "verify", "--json", database_url=fresh_database_url)
    assert cli.code == 1, cli.stderr
    bad = json.loads(cli.stdout)["bad"]
    assert [(b["stream_id"], b["version"], b["position"]) for b in bad] == [
        (streams[1], 3, target.position)
    ]


async def test_verify_finds_a_deleted_event(fresh_database_url: str) -> None:
    async with await Database.connect(fresh_database_url) as db:
        journal = Journal(db)
        stream = new_stream()
        await journal.append(stream, [event(n) for n in range(3)], expected_version=0)
        conn = await asyncpg.connect(fresh_database_url)
        try:
            await conn.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
            await conn.execute("DELETE FROM events WHERE stream_id = $1 AND version = 2", stream)
            await conn.execute("ALTER TABLE events ENABLE TRIGGER events_append_only")
        finally:
            await conn.close()
        report = await journal.verify()
    assert report.first_bad is not None
    assert report.first_bad.version == 3
    assert "version 2 is missing" in report.first_bad.problem


def test_the_canonical_time_is_utc_microseconds_with_a_z() -> None:
    from datetime import UTC, datetime, timedelta, timezone

    from ledger.canonical import format_time

    moments = [
        datetime(2026, 11, 30, 5, 29, 21, 7, tzinfo=UTC),
        datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=-7))),
        datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone(timedelta(hours=5, minutes=30))),
    ]
    for moment in moments:
        expected = moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        assert format_time(moment) == expected
    with pytest.raises(InvalidEvent, match="timezone-aware"):
        format_time(datetime(2026, 1, 1))


async def test_the_database_writes_a_time_as_the_canonical_text(db: Database) -> None:
    """`ledger verify` reads each event's time as the database forms it when it hashes the
    event (`to_char`); that text is `format_time`'s, so both hash the same bytes."""
    from datetime import UTC, datetime, timedelta, timezone

    from ledger.canonical import event_bytes, format_time, timed_event_bytes

    moments = [
        datetime(2026, 11, 30, 5, 29, 21, 7, tzinfo=UTC),
        datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=-7))),
        datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone(timedelta(hours=5, minutes=30))),
        datetime(2400, 2, 29, 0, 0, 0, 500000, tzinfo=UTC),
    ]
    async with db.connection() as conn:
        for moment in moments:
            text = await conn.fetchval(
                """SELECT to_char($1::timestamptz AT TIME ZONE 'UTC',
                                  'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')""",
                moment,
            )
            assert text == format_time(moment)
            assert timed_event_bytes(
                "s", 3, "t", "a", text, '{"k":1}', tag_version=2
            ) == event_bytes("s", 3, "t", "a", moment, '{"k":1}', tag_version=2)
