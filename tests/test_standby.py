"""Auditors' reads from a real hot standby: a PostgreSQL 15 primary and a standby streaming from
it (`support.standby`), the primary migrated and written through the library, the standby's
replay paused once it has caught up, then one more event written on the primary. What the
auditor commands and endpoints answer from the standby is then the journal without that event,
and they say the standby is behind; a write sent to the standby fails with one line."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import httpx
import pytest

from adapters.http.server import running
from adapters.http.service import open_service
from adapters.http.standby import LAG_BYTES_HEADER, LAG_HEADER
from approvals import ApprovalPolicy, ApprovalStore, Decision
from ledger.audit.digest import take_digest
from ledger.calls.model import CallContext, CallStatus, ToolCall
from ledger.calls.service import ToolLedger
from ledger.errors import DatabaseUnavailable, ReadOnlyDatabase
from ledger.journal import Journal, NewEvent
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database, migrate
from ledger.store.config import with_login
from ledger.store.db import open_raw_connection
from ledger.store.fence import HistoryFence
from ledger.store.logins import temporary_login
from ledger.store.settings import Settings
from ledger.store.standby import open_standby, standby_lag

from .support.http import token_for
from .support.processes import TEST_KEK, TEST_REVIEWER_KEK, kek_env, run_cli
from .support.scratch import event_count
from .support.standby import Pair, missing_binaries, primary_and_standby, replayed
from .support.until import until

pytestmark = pytest.mark.timeout(300)

_LAG_LINE = re.compile(r"^standby: replayed up to \S+, at most [0-9.]+ s behind \(\d+ bytes of WAL")


@dataclass
class Scene:
    pair: Pair
    reviewer_url: str  # a login with only signoff_reviewer, on the primary
    digest: Path  # a digest of the journal as the standby holds it
    newer: Path  # a digest of the primary's journal, one event more
    replayed_events: int  # the events the standby holds
    primary_events: int  # the events the primary holds: one more
    position: int  # an event in the digest


async def _refund(args: dict[str, Any], context: CallContext) -> str:
    return f"refunded {args['amount']}"


async def _write(db: Database, ring: KeyRing) -> None:
    """An approved refund, run once through the ledger: approvals, calls and their events."""
    store = ApprovalStore(db, ring)
    ledger = ToolLedger(db, ring)
    try:
        run = f"run-{uuid.uuid4().hex[:8]}"
        approval = await store.request(
            run_id=run,
            tool="refund",
            args={"amount": 120},
            call_id="refund/1",
            requested_by="support-agent",
            policy=ApprovalPolicy(approvers=frozenset({"rita"})),
        )
        await store.decide(approval.approval_id, Decision.approve(), "rita")
        call = ToolCall(run, "refund/1", "refund", {"amount": 120}, turn_id="t1")
        outcome = await ledger.execute(call, _refund)
        assert outcome.status is CallStatus.SUCCEEDED
    finally:
        await ledger.close()
        await store.close()


async def _pause_replay(standby_url: str) -> None:
    """Pause the standby's replay, and wait until it has paused (it stops before the next
    record it would apply)."""
    conn = await open_raw_connection(standby_url)

    async def paused() -> bool:
        return bool(await conn.fetchval("SELECT pg_get_wal_replay_pause_state() = 'paused'"))

    try:
        await conn.execute("SELECT pg_wal_replay_pause()")
        await until(paused, 30, "the standby's replay pauses")
    finally:
        await conn.close()


@pytest.fixture(scope="module")
async def scene(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Scene]:
    if (why := missing_binaries()) is not None:
        pytest.skip(f"no PostgreSQL 15 server programs: {why}")
    async with primary_and_standby() as pair:
        await asyncio.to_thread(migrate.upgrade, pair.primary_url)
        folder = tmp_path_factory.mktemp("standby")
        async with await Database.connect(pair.primary_url, pool_size=2) as db:
            ring = await KeyRing.open(db, LocalKek(TEST_KEK))
            await _write(db, ring)
            digest = await take_digest(db, ring)
            (folder / "digest.json").write_text(digest.to_json())
            async with temporary_login(pair.primary_url, "signoff_reviewer") as reviewer_url:
                await replayed(pair.primary_url, pair.standby_url)
                await _pause_replay(pair.standby_url)
                # Written after the pause: the primary has it, the standby will not.
                await Journal(db).append(
                    f"test:{uuid.uuid4().hex[:8]}",
                    [NewEvent("test.after_pause", {"n": 1}, actor="tester")],
                    expected_version=0,
                )
                newer = await take_digest(db, ring)
                (folder / "newer.json").write_text(newer.to_json())
                replayed_events = await event_count(pair.standby_url)
                primary_events = await event_count(pair.primary_url)
                assert primary_events == replayed_events + 1
                yield Scene(
                    pair,
                    reviewer_url,
                    folder / "digest.json",
                    folder / "newer.json",
                    replayed_events,
                    primary_events,
                    digest.last_position,
                )


def _env(scene: Scene, **more: str) -> dict[str, str]:
    return {**kek_env(), "SIGNOFF_DATABASE_URL": scene.pair.primary_url, **more}


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


async def test_export_reads_the_standby_and_says_how_far_behind_it_is(scene: Scene) -> None:
    env = _env(scene, SIGNOFF_READ_DATABASE_URL=scene.pair.standby_url)
    result = await run_cli("ledger", "export", env=env)
    assert result.code == 0, result.stderr
    exported = [json.loads(line) for line in _lines(result.stdout)]
    assert len(exported) == scene.replayed_events, "the standby's journal, not the primary's"
    assert not any(e["type"] == "test.after_pause" for e in exported)
    assert _LAG_LINE.match(result.stderr), result.stderr


async def test_verify_on_the_standby_checks_its_journal_and_the_digest(scene: Scene) -> None:
    env = _env(scene, SIGNOFF_READ_DATABASE_URL=scene.pair.standby_url)
    result = await run_cli("ledger", "verify", "--digest", str(scene.digest), "--json", env=env)
    assert result.code == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is True
    assert report["events"] == scene.replayed_events
    assert report["digest"]["ok"] is True
    standby = report["standby"]
    assert standby["standby"] is True
    assert standby["bytes_behind"] > 0
    assert standby["seconds_behind"] >= 0
    assert any(_LAG_LINE.match(line) for line in result.stderr.splitlines()), result.stderr


async def test_prove_takes_the_standby_on_its_command_line(scene: Scene) -> None:
    result = await run_cli(
        "ledger",
        "prove",
        str(scene.position),
        "--digest",
        str(scene.digest),
        "--read-database-url",
        scene.pair.standby_url,
        env=_env(scene),
    )
    assert result.code == 0, result.stderr
    proof = json.loads(result.stdout)
    assert proof["tree_size"] == json.loads(scene.digest.read_text())["tree_size"]
    assert _LAG_LINE.match(result.stderr), result.stderr


async def test_a_digest_the_standby_has_not_replayed_is_not_proven_rather_than_tampered(
    scene: Scene,
) -> None:
    env = _env(scene, SIGNOFF_READ_DATABASE_URL=scene.pair.standby_url)
    result = await run_cli(
        "ledger", "prove", str(scene.position), "--digest", str(scene.newer), env=env
    )
    assert result.code == 1
    lag, refusal = _lines(result.stderr)
    assert _LAG_LINE.match(lag), result.stderr
    assert refusal.startswith("NOT PROVEN: "), refusal
    assert "standby that was behind" in refusal
    checked = await run_cli("ledger", "verify", "--digest", str(scene.newer), env=env)
    assert checked.code == 1
    assert "digest DOES NOT MATCH" in checked.stdout
    assert "read from a standby that was behind the primary" in checked.stdout


async def test_a_read_url_that_is_a_primary_reads_and_says_it_is_no_standby(
    scene: Scene,
) -> None:
    env = _env(scene, SIGNOFF_READ_DATABASE_URL=scene.pair.primary_url)
    result = await run_cli("ledger", "export", env=env)
    assert result.code == 0, result.stderr
    assert len(_lines(result.stdout)) == scene.primary_events
    assert result.stderr.startswith("standby: not a standby (not in recovery)"), result.stderr


async def test_a_write_sent_to_the_standby_fails_with_one_line(scene: Scene) -> None:
    result = await run_cli(
        "ledger", "digest", "--database-url", scene.pair.standby_url, env=kek_env()
    )
    assert result.code == 2
    assert _lines(result.stderr) == [result.stderr.strip()], "one line"
    assert result.stderr.startswith("error: "), result.stderr
    assert "takes no writes" in result.stderr
    assert "25006" in result.stderr


@pytest.mark.parametrize("where", ["standby", "primary"])
async def test_a_library_write_through_the_read_database_is_refused(
    scene: Scene, where: str
) -> None:
    read = scene.pair.standby_url if where == "standby" else scene.pair.primary_url
    settings = Settings(database_url=scene.pair.primary_url, read_database_url=read)
    async with await open_standby(settings, pool_size=1) as reads:
        with pytest.raises(ReadOnlyDatabase) as refused:
            await Journal(reads).append(
                f"test:{uuid.uuid4().hex[:8]}",
                [NewEvent("test.refused", {"n": 1}, actor="tester")],
                expected_version=0,
            )
    assert refused.value.sqlstate == "25006"
    assert "\n" not in str(refused.value)
    assert "takes no writes" in str(refused.value)
    assert await event_count(scene.pair.primary_url) == scene.primary_events, "nothing written"


async def test_the_lag_without_the_primary_is_the_last_replayed_commits_age(
    scene: Scene,
) -> None:
    settings = Settings(read_database_url=scene.pair.standby_url)
    async with await open_standby(settings, pool_size=1) as reads:
        lag = await standby_lag(reads)
        caught = await standby_lag(reads, scene.pair.primary_url)
        away = await standby_lag(reads, "postgresql://postgres@127.0.0.1:1/signoff")
    assert lag.standby and lag.bytes_behind is None and lag.replayed_at is not None
    assert "(the primary is not known; measured from the last replayed commit" in lag.line()
    assert caught.bytes_behind is not None and caught.bytes_behind > 0
    assert caught.replay_lsn == lag.replay_lsn, "replay is paused"
    assert away.bytes_behind is None and away.seconds_behind is not None
    assert "(the primary did not answer at postgresql://" in away.line()


@pytest.fixture(scope="module")
async def service(scene: Scene) -> AsyncIterator[httpx.AsyncClient]:
    """`signoff serve` on the primary's reviewer login, reading auditors' requests from the
    standby with the same login."""
    settings = Settings(
        database_url=scene.reviewer_url,
        read_database_url=with_login(
            scene.pair.standby_url,
            *_credentials(scene.reviewer_url),
        ),
        kek=LocalKek(TEST_KEK),
        reviewer_kek=LocalKek(TEST_REVIEWER_KEK),
    )
    opened = await open_service(settings, pool_size=4)
    try:
        async with (
            running(opened) as (_, port),
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as client,
        ):
            yield client
    finally:
        await opened.close()


def _credentials(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    assert parts.username is not None and parts.password is not None
    return parts.username, parts.password


@pytest.fixture(scope="module")
async def tokens(scene: Scene) -> dict[str, dict[str, str]]:
    async with await Database.connect(scene.pair.primary_url, pool_size=1) as db:
        return {
            "auditor": await token_for(db, "audit-1", scope="auditor"),
            "reviewer": await token_for(db, "rita"),
        }


def _behind(response: httpx.Response) -> None:
    assert response.status_code == 200, response.text
    assert float(response.headers[LAG_HEADER]) >= 0
    assert int(response.headers[LAG_BYTES_HEADER]) > 0


async def test_the_service_answers_auditors_from_the_standby_with_its_lag(
    scene: Scene, service: httpx.AsyncClient, tokens: dict[str, dict[str, str]]
) -> None:
    auditor = tokens["auditor"]
    exported = await service.get("/v1/ledger/export", params={"limit": "1000"}, headers=auditor)
    _behind(exported)
    assert len(exported.json()["events"]) == scene.replayed_events
    calls = await service.get("/v1/calls", headers=auditor)
    _behind(calls)
    assert len(calls.json()["calls"]) == 1
    approvals = await service.get("/v1/approvals", params={"status": "all"}, headers=auditor)
    _behind(approvals)
    assert len(approvals.json()["approvals"]) == 1
    digest = json.loads(scene.digest.read_text())
    proof = await service.post(
        "/v1/ledger/proofs/inclusion",
        json={"position": scene.position, "digest": digest},
        headers=auditor,
    )
    _behind(proof)
    metrics = await service.get("/metrics", headers=auditor)
    assert metrics.status_code == 200
    sample = re.search(r"^signoff_read_replica_lag_bytes (\S+)$", metrics.text, re.M)
    assert sample is not None and float(sample.group(1)) > 0, metrics.text


async def test_digests_and_reviewers_stay_on_the_primary(
    scene: Scene, service: httpx.AsyncClient, tokens: dict[str, dict[str, str]]
) -> None:
    taken = await service.get("/v1/ledger/digest", headers=tokens["auditor"])
    assert taken.status_code == 200, taken.text
    on_primary = await event_count(scene.pair.primary_url)
    assert taken.json()["tree_size"] == on_primary > scene.replayed_events, "the primary's"
    assert LAG_HEADER not in taken.headers
    queue = await service.get(
        "/v1/calls", params={"status": "outcome_unknown"}, headers=tokens["reviewer"]
    )
    assert queue.status_code == 200, queue.text
    assert LAG_HEADER not in queue.headers


async def test_a_fence_that_reaches_a_lagging_standby_waits_rather_than_refuses(
    scene: Scene,
) -> None:
    """A connection that lands on a standby (a multi-host URL without `read-write`, an endpoint
    that pointed at a reader during a failover) may find the newest commits missing only
    because the standby is behind: unavailable, never `HistoryLost` for good."""
    primary = await asyncpg.connect(scene.pair.primary_url)
    try:
        newest = await primary.fetchrow(
            "SELECT position, encode(hash, 'hex') AS hash FROM events "
            "ORDER BY position DESC LIMIT 1"
        )
        fence = HistoryFence("the test's cluster")
        fence.saw(newest["position"], newest["hash"])
        await fence.check(primary)  # the primary holds it
    finally:
        await primary.close()
    standby = await asyncpg.connect(scene.pair.standby_url)
    try:
        with pytest.raises(DatabaseUnavailable, match="standby"):
            await fence.check(standby)
    finally:
        await standby.close()
    assert fence.lost is None  # nothing latched: the next connection may reach the primary
