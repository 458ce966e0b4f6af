"""The live feed of approval changes behind the SSE stream: changes committed through any
connection or process reach every feed through PostgreSQL, a cursor (`Last-Event-ID`) resumes
without a gap, and a transaction holding the journal's horizon back delays no notified change;
and the SSE wire format.

The feed tests run on a private server: the journal's horizon is the whole server's, and a
transaction another user leaves open on a shared one would hold these tests back."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from adapters.http.live import (
    KEEPALIVE,
    ApprovalChange,
    ApprovalFeed,
    InvalidStreamField,
    sse_format,
)
from approvals import ApprovalPolicy, ApprovalStore, Decision
from ledger.errors import InvalidEvent
from ledger.journal import Journal, NewEvent
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database, migrate
from ledger.store.db import open_raw_connection
from ledger.store.embedded import ensure_server

from .support.directory import list_reviewers
from .support.embedded_homes import private_home
from .support.processes import TEST_KEK, kek_env, run_cli

GUARD = 60  # seconds before a stuck test fails instead of hanging; no test measures time


@pytest.fixture(scope="module")
async def live_url() -> AsyncIterator[str]:
    with private_home() as home:
        url = await asyncio.to_thread(ensure_server, Path(home))
        await asyncio.to_thread(migrate.upgrade, url)
        await list_reviewers(url)
        yield url


@pytest.fixture(scope="module")
async def live_db(live_url: str) -> AsyncIterator[Database]:
    database = await Database.connect(live_url, pool_size=4)
    yield database
    await database.close()


@pytest.fixture(scope="module")
async def live_store(live_db: Database) -> AsyncIterator[ApprovalStore]:
    approvals = ApprovalStore(live_db, await KeyRing.open(live_db, LocalKek(TEST_KEK)))
    yield approvals
    await approvals.close()


@pytest.fixture(scope="module")
async def replica(live_url: str) -> AsyncIterator[Database]:
    """A second pool on the same database: another service replica's."""
    database = await Database.connect(live_url, pool_size=2)
    yield database
    await database.close()


@pytest.fixture
async def feed(replica: Database) -> AsyncIterator[ApprovalFeed]:
    # A poll interval no test waits out: changes that notify arrive by NOTIFY alone.
    live = ApprovalFeed(replica, poll_interval=3600)
    yield live
    await live.close()


async def ask(store: ApprovalStore, policy: ApprovalPolicy | None = None) -> str:
    approval = await store.request(
        run_id=f"live-{uuid.uuid4().hex[:8]}",
        tool="refund",
        args={"order_id": "A7", "amount": 120},
        call_id="call-1",
        requested_by="agent",
        policy=policy,
    )
    return approval.approval_id


class Tail:
    """One reader of a feed, as an SSE response would be."""

    def __init__(self, feed: ApprovalFeed, since: int | None) -> None:
        self.feed = feed
        self.changes = feed.changes(since=since)
        self.pending: asyncio.Future[ApprovalChange] | None = None

    async def start(self) -> Tail:
        """Running, subscribed and listening: a notification from now on reaches it."""
        self.pending = asyncio.ensure_future(anext(self.changes))
        await asyncio.sleep(0)  # it subscribes before its first read
        await asyncio.wait_for(self.feed.listen(), GUARD)
        assert self.feed.listening
        return self

    async def next(self) -> ApprovalChange:
        if self.pending is None:
            self.pending = asyncio.ensure_future(anext(self.changes))
        pending, self.pending = self.pending, None
        return await asyncio.wait_for(pending, GUARD)

    async def until(self, approval_id: str, event: str | None) -> ApprovalChange:
        """The next change of `approval_id` that is `event` (others' changes skipped)."""
        while True:
            change = await self.next()
            if change.approval_id == approval_id and change.event == event:
                return change

    async def close(self) -> None:
        if self.pending is not None:
            self.pending.cancel()
            await asyncio.gather(self.pending, return_exceptions=True)
        await self.changes.aclose()


async def tail(feed: ApprovalFeed) -> Tail:
    return await Tail(feed, await feed.position()).start()


# -- the feed ------------------------------------------------------------------------------------


async def test_a_request_and_its_decision_reach_a_feed_on_another_pool(
    live_store: ApprovalStore, feed: ApprovalFeed
) -> None:
    reader = await tail(feed)
    approval_id = await ask(live_store)
    requested = await reader.until(approval_id, "approval.requested")
    await live_store.decide(approval_id, Decision.approve(), "bob")
    decided = await reader.until(approval_id, "approval.decided")
    assert requested.position is not None and decided.position is not None
    assert requested.position < decided.position
    assert decided.to_json() == {
        "position": decided.position,
        "approval_id": approval_id,
        "event": "approval.decided",
        "at": None if decided.at is None else decided.at.isoformat(),
    }
    await reader.close()


async def test_a_feed_from_now_yields_what_commits_later(
    live_store: ApprovalStore, feed: ApprovalFeed
) -> None:
    before = await ask(live_store)
    reader = await Tail(feed, None).start()
    later = await ask(live_store)
    change = await reader.next()  # not `before`: it was there when the feed started
    # Its event, or (had the feed taken its start only after `later` committed) its
    # notification: either way `later` is announced.
    assert change.approval_id == later and change.event in ("approval.requested", None)
    assert before != later
    await reader.close()


async def test_two_replicas_feeds_see_the_same_changes_in_the_same_order(
    live_store: ApprovalStore, replica: Database, live_url: str
) -> None:
    async with await Database.connect(live_url, pool_size=2) as third:
        one = ApprovalFeed(replica, poll_interval=3600)
        two = ApprovalFeed(third, poll_interval=3600)
        a, b = await tail(one), await tail(two)
        try:
            ids = [await ask(live_store) for _ in range(3)]
            seen_a = [await a.until(i, "approval.requested") for i in ids]
            seen_b = [await b.until(i, "approval.requested") for i in ids]
            assert seen_a == seen_b
            positions = [c.position or 0 for c in seen_a]
            assert positions == sorted(positions) and 0 not in positions
        finally:
            await a.close()
            await b.close()
            await one.close()
            await two.close()


async def test_a_decision_in_another_os_process_reaches_the_feed(
    live_store: ApprovalStore, feed: ApprovalFeed, live_url: str
) -> None:
    approval_id = await ask(live_store)
    reader = await tail(feed)
    decided = await run_cli(
        "approvals", "decide", approval_id, "--approve", "--by", "bob", "--json",
        database_url=live_url, env=kek_env(),
    )  # fmt: skip
    assert decided.code == 0, decided.stderr
    change = await reader.until(approval_id, "approval.decided")
    assert change.position is not None
    await reader.close()


async def test_a_vote_that_does_not_notify_arrives_by_the_poll(
    live_store: ApprovalStore, replica: Database
) -> None:
    polling = ApprovalFeed(replica, poll_interval=0.05)
    approval_id = await ask(live_store, ApprovalPolicy(quorum=2, any_reviewer=True))
    reader = await tail(polling)
    try:
        await live_store.decide(approval_id, Decision.approve(), "bob")  # one of two: not final
        await reader.until(approval_id, "approval.decided")
        assert (await live_store.get(approval_id)).status.final is False
    finally:
        await reader.close()
        await polling.close()


async def test_a_cursor_resumes_after_its_position_with_nothing_missed_or_repeated(
    live_store: ApprovalStore, feed: ApprovalFeed
) -> None:
    reader = await tail(feed)
    first, second, third = [await ask(live_store) for _ in range(3)]
    seen = await reader.until(first, "approval.requested")
    await reader.close()
    # The client went away after `first`; `second` and `third` were committed meanwhile.
    assert seen.position is not None
    resumed = Tail(feed, seen.position)
    got = [await resumed.next() for _ in range(2)]
    assert [(c.approval_id, c.event) for c in got] == [
        (second, "approval.requested"),
        (third, "approval.requested"),
    ]
    assert all((c.position or 0) > seen.position for c in got)
    await resumed.close()


async def test_a_held_horizon_delays_a_change_and_nothing_comes_ahead_of_it(
    live_store: ApprovalStore, feed: ApprovalFeed, live_url: str
) -> None:
    reader = await tail(feed)
    holder = await open_raw_connection(live_url)
    try:
        # An older transaction left open (a long report, a dump): the journal reads nothing
        # committed after it began until it ends, and a notification is no event.
        transaction = holder.transaction()
        await transaction.start()
        await holder.fetchval("SELECT pg_current_xact_id()")
        held = await ask(live_store)
        await transaction.rollback()
        after = await ask(live_store)  # its notification wakes the feed past the horizon
        first = await reader.next()
        assert (first.approval_id, first.event) == (held, "approval.requested")
        assert first.position is not None
        assert await reader.until(after, "approval.requested")
    finally:
        await holder.close()
        await reader.close()


async def test_other_streams_are_not_approval_changes(
    live_store: ApprovalStore, feed: ApprovalFeed, live_db: Database
) -> None:
    reader = await tail(feed)
    await Journal(live_db).append(
        f"other:{uuid.uuid4().hex}", [NewEvent("other.thing", {}, "test")], expected_version=0
    )
    approval_id = await ask(live_store)
    nxt = await reader.next()
    assert (nxt.approval_id, nxt.event) == (approval_id, "approval.requested")
    await reader.close()


@pytest.mark.parametrize("since", [-1, 2**63, 10**12, True, "7"])
async def test_a_cursor_that_is_no_event_is_refused(feed: ApprovalFeed, since: Any) -> None:
    changes = feed.changes(since=since)
    with pytest.raises(InvalidEvent):
        await asyncio.wait_for(anext(changes), GUARD)


async def test_position_is_the_last_readable_event(
    feed: ApprovalFeed, live_store: ApprovalStore
) -> None:
    before = await feed.position()
    await ask(live_store)
    after = await feed.position()
    assert after > before


# -- the wire format -----------------------------------------------------------------------------


def parse(stream: bytes) -> list[dict[str, str]]:
    """Server-Sent Events as a browser reads them (WHATWG HTML, "Interpreting an event stream")."""
    events: list[dict[str, str]] = []
    data: list[str] = []
    fields: dict[str, str] = {}
    for line in re.split(r"\r\n|\r|\n", stream.decode("utf-8")):
        if line == "":
            if data or fields:
                events.append({**fields, "data": "\n".join(data)})
            data, fields = [], {}
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "data":
            data.append(value)
        elif name in ("id", "event") and "\x00" not in value:
            fields[name] = value
    return events


TEXTS = [
    "plain",
    "",
    "two\nlines",
    "crlf\r\nline",
    "cr\rline",
    "\n\nleading and trailing\n",
    "data: forged\n\nid: 666\nevent: approved",
    ": a comment\nretry: 1",
    "unicode \u2028 and \u00e9 and \U0001f600",
]


@pytest.mark.parametrize("text", TEXTS)
def test_text_with_line_breaks_stays_one_event(text: str) -> None:
    wire = sse_format(42, "approval", text)
    assert wire.endswith(b"\n\n")
    events = parse(wire)
    assert events == [{"id": "42", "event": "approval", "data": re.sub(r"\r\n|\r", "\n", text)}]


def test_json_data_and_events_in_a_row() -> None:
    payload = {"approval_id": "apr-1", "note": "a\nb\r\nc", "n": [1, 2.5, None]}
    wire = sse_format(7, "approval", payload) + KEEPALIVE + sse_format("8", None, "x")
    first, second = parse(wire)
    assert first["id"] == "7" and json.loads(first["data"]) == payload
    assert second == {"id": "8", "data": "x"}
    assert sse_format(None, None, "only data") == b"data: only data\n\n"


@pytest.mark.parametrize(
    ("event_id", "event"),
    [
        ("1\n2", "approval"),
        ("1\r", "approval"),
        ("1\x002", "approval"),
        (1, "appr\noval"),
        (1, "a\rb"),
    ],
)
def test_ids_and_names_that_would_break_the_frame_are_refused(event_id: Any, event: str) -> None:
    with pytest.raises(InvalidStreamField):
        sse_format(event_id, event, "x")


@pytest.mark.parametrize(
    "data", [{"x": float("nan")}, {"x": {1, 2}}, {"x": object()}, "lone \ud800 surrogate"]
)
def test_data_that_cannot_go_on_the_wire_is_refused(data: Any) -> None:
    with pytest.raises(InvalidStreamField):
        sse_format(1, "approval", data)


def test_deeply_nested_data_is_refused_not_crashing() -> None:
    value: Any = []
    for _ in range(100_000):
        value = [value]
    with pytest.raises(InvalidStreamField):
        sse_format(1, "approval", value)
