"""Tag versions 3 (RFC 8785 data and the login under `signoff.event.v3`, every event written
now) and 2 (the same without the login, events written before): that an event recorded with any
other tag version, or whose login does not fit its tag, is reported by verify and refused by the
offline verifier, and that the database's hashes of floats and wide keys are the ones Python
recomputes."""

from __future__ import annotations

import json
import uuid
from typing import Any

import asyncpg
import pytest

from ledger.audit.verifier import ExportedEvent, MalformedDocument
from ledger.canonical import chain_hash, event_bytes
from ledger.journal import Journal, NewEvent
from ledger.store import Database

from .support.processes import run_cli
from .test_jcs import load_event_vectors, reference_event_bytes, reference_jcs

# Floats and a key beyond U+FFFF: where RFC 8785 and Python's sorted JSON differ.
AWKWARD = {"small": 1e-07, "big": 1e21, "whole": 2.0, "\U0001f602": "x", "\ufb33": "y"}


async def tamper(url: str, sql: str, *args: Any) -> None:
    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            await conn.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
            await conn.execute(sql, *args)
            await conn.execute("ALTER TABLE events ENABLE TRIGGER events_append_only")
    finally:
        await conn.close()


async def test_a_tag_version_other_than_2_or_3_is_reported(fresh_database_url: str) -> None:
    """The append functions record tag version 3 only, and the column holds nothing but 2 or 3
    (NOT NULL, a domain that checks it). An event whose recorded version is changed all the same
    (by the table's owner, with the checks dropped: to 1, or to one no code knows, or to 2,
    which has no login) is hashed under no tag this code knows, so verify reports it."""
    url = fresh_database_url
    streams = [f"note:{uuid.uuid4().hex[:8]}" for _ in range(4)]
    one, seven, two, kept = streams
    async with await Database.connect(url) as db:
        journal = Journal(db)
        for stream in streams:
            event = NewEvent("noted", {"n": 1}, "auditor")
            await journal.append(stream, [event], expected_version=0)
        assert (await journal.verify()).ok

        update = "UPDATE events SET tag_version = $2 WHERE stream_id = $1"
        unchecked = "ALTER DOMAIN signoff_tag_version DROP CONSTRAINT signoff_tag_version_check"
        with pytest.raises(asyncpg.NotNullViolationError):
            await tamper(url, update, one, None)
        with pytest.raises(asyncpg.CheckViolationError):  # tag 2 has no login
            await tamper(url, update, two, 2)
        await tamper(url, unchecked)
        await tamper(url, "ALTER TABLE events DROP CONSTRAINT events_login_check")
        await tamper(url, update, one, 1)
        await tamper(url, update, seven, 7)
        await tamper(url, update, two, 2)
        assert [e.tag_version for e in await journal.read_stream(one)] == [1]
        report = await journal.verify()
        bad = {b.stream_id: b.problem for b in report.bad}
        assert set(bad) == {one, seven, two}
        for stream, version in ((one, 1), (seven, 7)):
            assert f"unknown event tag version {version}" in bad[stream], bad
        assert "tag version 2 has no login" in bad[two], bad

    result = await run_cli("ledger", "verify", database_url=url)
    assert result.code == 1 and one in result.stdout + result.stderr, result
    assert kept not in result.stdout + result.stderr


def _document(stream: dict[str, Any]) -> dict[str, Any]:
    first = stream["events"][0]
    return {
        "position": 1,
        "txid": 1,
        "stream_id": stream["stream_id"],
        **{k: first[k] for k in ("version", "type", "actor", "recorded_at", "data", "hash")},
        "prev_hash": first["prev_hash"],
        "tag_version": stream["tag_version"],
        "login": first.get("login"),
    }


def test_the_offline_verifier_refuses_an_event_of_no_tag_version_or_another() -> None:
    v2, v3 = load_event_vectors()["streams"]
    for stream in (v2, v3):
        doc = _document(stream)
        event = ExportedEvent.from_dict(doc)
        assert event.recomputed_hash().hex() == stream["events"][0]["hash"]
        assert event.to_dict()["login"] == doc["login"]
        without = {k: v for k, v in doc.items() if k != "tag_version"}
        with pytest.raises(MalformedDocument, match="tag_version"):
            ExportedEvent.from_dict(without)
        for version in (1, 4):
            with pytest.raises(MalformedDocument, match=f"`tag_version` {version} is unknown"):
                ExportedEvent.from_dict(doc | {"tag_version": version})
    # A document of before logins were recorded (no `login` key) still reads as tag 2.
    old = {k: v for k, v in _document(v2).items() if k != "login"}
    assert ExportedEvent.from_dict(old).login is None


def test_the_offline_verifier_takes_the_login_as_evidence() -> None:
    """A tag-3 document without its login is malformed, a tag-2 one with a login too; a login
    changed in the document no longer gives the hash."""
    v2, v3 = load_event_vectors()["streams"]
    doc = _document(v3)
    for login in (None, "", 7):
        with pytest.raises(MalformedDocument, match="login"):
            ExportedEvent.from_dict(doc | {"login": login})
    with pytest.raises(MalformedDocument, match="login"):
        ExportedEvent.from_dict({k: v for k, v in doc.items() if k != "login"})
    with pytest.raises(MalformedDocument, match="tag version 2 "):
        ExportedEvent.from_dict(_document(v2) | {"login": "signoff_worker"})
    forged = ExportedEvent.from_dict(doc | {"login": "signoff"})
    assert forged.recomputed_hash() != forged.hash


async def test_new_rows_take_tag_version_3_with_a_login(fresh_database_url: str) -> None:
    """Tag 1 is no tag; tag 3 (the default) needs the login, tag 2 has none."""
    insert = (
        "INSERT INTO events (txid, stream_id, version, type, data, actor, recorded_at, hash{})"
        " VALUES (pg_current_xact_id(), 'x', 1, 't', '{{}}', 'a', now(), sha256(''){})"
    )
    async with await Database.connect(fresh_database_url) as db, db.connection() as conn:
        for columns, values in (
            (", tag_version", ", 1"),
            ("", ""),
            (", tag_version", ", 3"),
            (", tag_version, login", ", 2, 'signoff_app'"),
            (", tag_version, login", ", 1, 'signoff_app'"),
        ):
            with pytest.raises(asyncpg.CheckViolationError):
                await conn.execute(insert.format(columns, values))
        scratch = conn.transaction()  # the same row with a login is one the table takes
        await scratch.start()
        await conn.execute(insert.format(", login", ", 'signoff_app'"))
        await scratch.rollback()


async def test_the_database_hashes_the_vectors_as_python_and_the_reference_do(
    fresh_database_url: str,
) -> None:
    """Floats, wide keys and escapes: the chain the append function computes is the one
    `ledger.canonical` and the test's own implementation recompute."""
    vectors = next(s for s in load_event_vectors()["streams"] if s["tag_version"] == 3)
    values = [json.loads(e["input"]) for e in vectors["events"]]
    stream = f"vectors:{uuid.uuid4().hex[:8]}"
    async with await Database.connect(fresh_database_url) as db:
        journal = Journal(db)
        events = [
            NewEvent(e["type"], v, e["actor"])
            for e, v in zip(vectors["events"], values, strict=True)
        ]
        await journal.append(stream, events, expected_version=0)
        stored = await journal.read_stream(stream)
        async with db.connection() as conn:
            login = await conn.fetchval("SELECT session_user")
    previous = bytes(32)
    for event, vector, value in zip(stored, vectors["events"], values, strict=True):
        assert (event.tag_version, event.login) == (3, login)
        assert event.data_json == vector["data"] == reference_jcs(value)
        fields = [stream, str(event.version), event.type, event.actor]
        fields += [event.recorded_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), event.data_json, login]
        raw = reference_event_bytes("signoff.event.v3", fields)
        assert raw == event.canonical_bytes()
        assert raw == event_bytes(*_args(event), tag_version=3, login=login)
        previous = chain_hash(previous, raw)
        assert previous == event.hash
        assert json.loads(event.data_json) == value


def _args(event: Any) -> tuple[Any, ...]:
    return (
        event.stream_id,
        event.version,
        event.type,
        event.actor,
        event.recorded_at,
        event.data_json,
    )
