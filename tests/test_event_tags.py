"""Events of both tag versions in one journal: the migration that brought tag version 2 (RFC
8785 data under `signoff.event.v2`), what verify, exports and the offline verifier make of each
kind, and that the database's hashes of floats and wide keys are the ones Python recomputes."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import asyncpg
import pytest
from alembic.script import ScriptDirectory

from ledger.audit.export import export_events
from ledger.audit.verifier import ExportedEvent
from ledger.canonical import canonical_json, chain_hash, event_bytes, jcs_json
from ledger.journal import Journal, NewEvent
from ledger.store import Database, migrate
from ledger.store.logins import temporary_login

from .processes import run_cli
from .test_digest import settle
from .test_jcs import load_event_vectors, reference_event_bytes, reference_jcs

# Floats and a key beyond U+FFFF: their version 1 and version 2 texts differ.
AWKWARD = {"small": 1e-07, "big": 1e21, "whole": 2.0, "\U0001f602": "x", "\ufb33": "y"}
_FUNCTIONS = """
SELECT p.proname, p.proacl::text, p.prosecdef, p.proconfig::text, p.prosrc
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = 'public' AND p.prosrc LIKE '%signoff.event.v%'
ORDER BY p.proname
"""


def revision_of_tags() -> str:
    """The revision that added tag version 2."""
    scripts = ScriptDirectory.from_config(migrate.alembic_config(""))
    return next(
        script.revision
        for script in scripts.walk_revisions()
        if getattr(script.module, "NEW_TAG", None) == "signoff.event.v2"
    )


def tags_revisions() -> tuple[str, str]:
    """The revision that added tag version 2, and the one below it."""
    scripts = ScriptDirectory.from_config(migrate.alembic_config(""))
    for script in scripts.walk_revisions():
        if getattr(script.module, "NEW_TAG", None) == "signoff.event.v2":
            down = script.down_revision
            assert isinstance(down, str)
            return script.revision, down
    raise AssertionError("no migration adds tag version 2")


def revision_before_tags() -> str:
    return tags_revisions()[1]


async def hashing_functions(url: str) -> dict[str, tuple[Any, ...]]:
    conn = await asyncpg.connect(url)
    try:
        return {r[0]: tuple(r[1:]) for r in await conn.fetch(_FUNCTIONS)}
    finally:
        await conn.close()


async def append_as_before(url: str, stream: str, datas: list[dict[str, Any]]) -> None:
    """Append as the code of the revision before did: Python's sorted JSON text."""
    conn = await asyncpg.connect(url)
    try:
        await conn.fetchval(
            "SELECT signoff_append($1, 0, $2, $3, $4, NULL)",
            stream,
            ["noted"] * len(datas),
            [canonical_json(d) for d in datas],
            ["auditor"] * len(datas),
        )
    finally:
        await conn.close()


async def test_events_from_before_tag_version_2_still_verify_beside_new_ones(
    fresh_database_url: str,
) -> None:
    url = fresh_database_url
    await asyncio.to_thread(migrate.downgrade, url, revision_before_tags())
    mixed, old = f"note:{uuid.uuid4().hex[:8]}", f"note:{uuid.uuid4().hex[:8]}"
    await append_as_before(url, mixed, [AWKWARD, {"n": 1}])
    await append_as_before(url, old, [AWKWARD])

    await asyncio.to_thread(migrate.upgrade, url, "head")
    async with await Database.connect(url) as db:
        journal = Journal(db)
        await journal.append(mixed, [NewEvent("noted", AWKWARD, "auditor")], expected_version=2)
        fresh = f"note:{uuid.uuid4().hex[:8]}"
        await journal.append(fresh, [NewEvent("noted", AWKWARD, "auditor")], expected_version=0)
        events = await journal.read_stream(mixed)
        assert [e.tag_version for e in events] == [1, 1, 2]
        assert events[0].data_json == canonical_json(AWKWARD) != events[2].data_json
        assert events[2].data_json == jcs_json(AWKWARD)
        report = await journal.verify()
        assert report.ok and report.events == 5, report.bad

        await settle(db)  # the export reads what is below the (cluster-wide) horizon
        exported = [e async for e in export_events(db)]
        assert sorted(e.tag_version for e in exported) == [1, 1, 1, 2, 2]
        for event in exported:
            assert event.recomputed_hash() == event.hash
            # Parsed back from its document: what the offline verifier reads.
            assert ExportedEvent.from_dict(json.loads(json.dumps(event.to_dict()))) == event
            # A document from before tag version 2 has no tag_version: it means 1.
            legacy = {k: v for k, v in event.to_dict().items() if k != "tag_version"}
            matches = ExportedEvent.from_dict(legacy).recomputed_hash() == event.hash
            assert matches == (event.tag_version == 1)

    result = await run_cli("ledger", "verify", database_url=url)
    assert result.code == 0, result.stdout + result.stderr
    # An auditor recomputes every chain from the view alone.
    async with temporary_login(url, "signoff_auditor") as auditor:
        conn = await asyncpg.connect(auditor)
        try:
            rows = await conn.fetch(_AUDIT_EVENTS)
        finally:
            await conn.close()
    assert sorted(r["tag_version"] for r in rows) == [1, 1, 1, 2, 2]
    previous: dict[str, bytes] = {}
    for r in rows:
        fields = [r["stream_id"], r["version"], r["type"], r["actor"], r["recorded_at"], r["data"]]
        raw = event_bytes(*fields, tag_version=r["tag_version"])
        previous[r["stream_id"]] = chain_hash(previous.get(r["stream_id"], bytes(32)), raw)
        assert previous[r["stream_id"]] == r["hash"]


_AUDIT_EVENTS = """
SELECT stream_id, version, type, data::text AS data, actor, recorded_at, hash, tag_version
FROM audit_events ORDER BY stream_id, version
"""


async def tamper(url: str, sql: str, *args: Any) -> None:
    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            await conn.execute("ALTER TABLE events DISABLE TRIGGER events_append_only")
            await conn.execute(sql, *args)
            await conn.execute("ALTER TABLE events ENABLE TRIGGER events_append_only")
    finally:
        await conn.close()


async def test_a_flipped_tag_version_is_reported(fresh_database_url: str) -> None:
    url = fresh_database_url
    await asyncio.to_thread(migrate.downgrade, url, revision_before_tags())
    old = f"note:{uuid.uuid4().hex[:8]}"
    await append_as_before(url, old, [{"n": 1}])
    await asyncio.to_thread(migrate.upgrade, url, "head")
    new = f"note:{uuid.uuid4().hex[:8]}"
    async with await Database.connect(url) as db:
        journal = Journal(db)
        # Data whose text is the same in both forms: only the tag tells them apart.
        await journal.append(new, [NewEvent("noted", {"n": 1}, "auditor")], expected_version=0)
        other = f"note:{uuid.uuid4().hex[:8]}"
        await journal.append(other, [NewEvent("noted", {"n": 1}, "auditor")], expected_version=0)
        assert (await journal.verify()).ok

        update = "UPDATE events SET tag_version = $2 WHERE stream_id = $1"
        unchecked = "ALTER DOMAIN signoff_tag_version DROP CONSTRAINT signoff_tag_version_check"
        await tamper(url, unchecked)
        await tamper(url, update, new, None)  # 2 -> NULL, read as 1
        await tamper(url, update, old, 2)  # NULL (1) -> 2
        await tamper(url, update, other, 7)  # a version no code knows
        report = await journal.verify()
        bad = {b.stream_id: b.problem for b in report.bad}
        assert set(bad) == {new, old, other}
        assert bad[new].startswith("hash differs") and bad[old].startswith("hash differs")
        assert "unknown event tag version 7" in bad[other]

    result = await run_cli("ledger", "verify", database_url=url)
    assert result.code == 1 and new in result.stdout + result.stderr, result


async def test_new_rows_take_tag_version_2_and_nothing_else(fresh_database_url: str) -> None:
    async with await Database.connect(fresh_database_url) as db, db.connection() as conn:
        with pytest.raises(asyncpg.CheckViolationError):
            await conn.execute(
                "INSERT INTO events (txid, stream_id, version, type, data, actor, recorded_at,"
                " hash, tag_version) VALUES (pg_current_xact_id(), 'x', 1, 't', '{}', 'a', now(),"
                " '\\x00', 1)"
            )


async def test_the_migration_retags_the_functions_and_keeps_their_grants(
    fresh_database_url: str,
) -> None:
    url = fresh_database_url
    at_head = await hashing_functions(url)
    assert {"signoff_append", "signoff_write_events"} <= set(at_head)
    for name, (_, _, _, body) in at_head.items():
        assert "'signoff.event.v2'" in body and "signoff.event.v1" not in body, name

    # Later revisions may write some of them anew: compare with them as the retagging left them.
    tags, before_tags = tags_revisions()
    await asyncio.to_thread(migrate.downgrade, url, tags)
    at_tags = await hashing_functions(url)
    assert set(at_tags) == set(at_head)
    await asyncio.to_thread(migrate.downgrade, url, before_tags)
    before = await hashing_functions(url)
    assert set(before) == set(at_tags)
    for name, (acl, definer, config, body) in before.items():
        assert "'signoff.event.v1'" in body and "signoff.event.v2" not in body, name
        # Grants, SECURITY DEFINER and the pinned search_path survive, both ways.
        assert (acl, definer, config) == at_tags[name][:3], name
        assert body.replace("signoff.event.v1", "signoff.event.v2") == at_tags[name][3]
    conn = await asyncpg.connect(url)
    try:
        column = "SELECT count(*) FROM pg_attribute WHERE attrelid = 'events'::regclass"
        assert await conn.fetchval(column + " AND attname = 'tag_version'") == 0
    finally:
        await conn.close()

    await asyncio.to_thread(migrate.upgrade, url, tags)
    assert await hashing_functions(url) == at_tags
    await asyncio.to_thread(migrate.upgrade, url, "head")
    assert await hashing_functions(url) == at_head
    # A worker's login still appends through them (a type it may append, to a stream of no
    # projection).
    async with (
        temporary_login(url, "signoff_app") as app,
        await Database.connect(app) as db,
    ):
        stream = f"note:{uuid.uuid4().hex[:8]}"
        await Journal(db).append(
            stream, [NewEvent("call.retried", AWKWARD, "w")], expected_version=0
        )


async def test_the_downgrade_refuses_while_events_of_tag_version_2_exist(
    fresh_database_url: str,
) -> None:
    url = fresh_database_url
    async with await Database.connect(url) as db:
        stream = f"note:{uuid.uuid4().hex[:8]}"
        await Journal(db).append(stream, [NewEvent("noted", {}, "a")], expected_version=0)
    with pytest.raises(RuntimeError, match="1 events are of tag version 2"):
        await asyncio.to_thread(migrate.downgrade, url, revision_before_tags())
    conn = await asyncpg.connect(url)
    try:
        # The revisions above it went down; the one that added the tag refused and stays.
        assert await conn.fetchval("SELECT version_num FROM alembic_version") == (
            revision_of_tags()
        )
    finally:
        await conn.close()


async def test_the_database_hashes_the_vectors_as_python_and_the_reference_do(
    fresh_database_url: str,
) -> None:
    """Floats, wide keys and escapes: the chain the append function computes is the one
    `ledger.canonical` and the test's own implementation recompute."""
    vectors = next(s for s in load_event_vectors()["streams"] if s["tag_version"] == 2)
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
    previous = bytes(32)
    for event, vector, value in zip(stored, vectors["events"], values, strict=True):
        assert event.tag_version == 2
        assert event.data_json == vector["data"] == reference_jcs(value)
        fields = [stream, str(event.version), event.type, event.actor]
        fields += [event.recorded_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), event.data_json]
        raw = reference_event_bytes("signoff.event.v2", fields)
        assert raw == event.canonical_bytes() == event_bytes(*_args(event), tag_version=2)
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
