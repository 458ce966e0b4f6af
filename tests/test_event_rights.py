"""Event rights name the streams they apply to, and compare as written: a login holding only
`signoff_app` (or only `signoff_reviewer`, or only `signoff_key_admin`) appends the types it may
append into the streams its role writes and nowhere else, whatever the case of the prefix; `_`
in a right is a character, not a wildcard; `%` is one only at a right's end.

Every append below is the attacker's own SQL on its own login; the database is this module's
own, and nothing but its setup and the rights it adds runs as the owner.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
import pytest

from ledger.store.logins import temporary_login
from tests.support.scratch import scratch_database

_APPEND = "SELECT signoff_append($1, 0, ARRAY[$2], ARRAY[$3::json], ARRAY['mallory'], NULL)"


@dataclass(frozen=True)
class Logins:
    owner: str
    worker: str
    reviewer: str
    key_admin: str


@pytest.fixture(scope="module")
async def logins(server_url: str) -> AsyncIterator[Logins]:
    async with (
        scratch_database(server_url, prefix="signoff_rights") as owner,
        temporary_login(owner, "signoff_app") as worker,
        temporary_login(owner, "signoff_reviewer") as reviewer,
        temporary_login(owner, "signoff_key_admin") as key_admin,
    ):
        yield Logins(owner, worker, reviewer, key_admin)


async def append(url: str, stream: str, type_: str, data: object = None) -> str | None:
    """Append one event of `type_` to a new `stream` as `url`'s login: None when written, else
    the SQLSTATE of the refusal."""
    conn = await asyncpg.connect(url)
    try:
        await conn.fetchval(_APPEND, stream, type_, json.dumps(data or {}))
    except asyncpg.PostgresError as e:
        return str(e.sqlstate)
    finally:
        await conn.close()
    return None


async def written(owner: str, stream: str) -> int:
    conn = await asyncpg.connect(owner)
    try:
        count: int = await conn.fetchval("SELECT count(*) FROM events WHERE stream_id = $1", stream)
    finally:
        await conn.close()
    return count


@pytest.mark.parametrize("stream", ["reveal:x", "keys:x", "APPROVAL:x", "Call:x", "grant:x", "x"])
@pytest.mark.parametrize(
    "type_", ["approval.requested", "approval.consumed", "call.started", "call.outcome_unknown"]
)
async def test_a_worker_appends_its_types_into_no_stream_of_its_own_choosing(
    logins: Logins, stream: str, type_: str
) -> None:
    """A worker's types belong to approvals' and calls' streams, which it writes only with
    their rows (signoff_commit_approval, signoff_commit_call): `APPROVAL:x` is not
    `approval:x`, and a reveal's or a key's stream is no worker's."""
    assert await append(logins.worker, stream, type_) == "SG401"
    assert await written(logins.owner, stream) == 0


@pytest.mark.parametrize(
    ("type_", "stream"),
    [
        ("ledger.revealed", "keys:x"),
        ("ledger.revealed", "REVEAL:x"),
        ("ledger.revealed", "note:x"),
        ("approval.decided", "APPROVAL:x"),
        ("call.resolved", "reveal:x"),
        ("call.outcome_unknown", "Call:x"),
    ],
)
async def test_a_reviewer_appends_its_types_only_into_their_streams(
    logins: Logins, type_: str, stream: str
) -> None:
    assert await append(logins.reviewer, stream, type_) == "SG401"
    assert await written(logins.owner, stream) == 0


async def test_a_key_administrator_appends_key_events_only_into_key_streams(
    logins: Logins,
) -> None:
    assert await append(logins.key_admin, "keys:rights-test", "key.noted") is None
    for stream in ("reveal:x", "KEYS:x", "key:x", "approval:x"):
        assert await append(logins.key_admin, stream, "key.noted") == "SG401", stream
        assert await written(logins.owner, stream) == 0


@pytest.mark.parametrize(
    ("url_of", "type_"),
    [
        ("worker", "call.outcomeXunknown"),
        ("worker", "call.outcome-unknown"),
        ("reviewer", "call.outcomeXunknown"),
        ("key_admin", "keyXnoted"),
    ],
)
async def test_an_underscore_or_a_dot_in_a_right_matches_only_itself(
    logins: Logins, url_of: str, type_: str
) -> None:
    """`call.outcome_unknown` used to be a LIKE pattern, whose `_` matches any character."""
    stream = "APPROVAL:underscore" if url_of != "key_admin" else "keys:underscore"
    assert await append(getattr(logins, url_of), stream, type_) == "SG401"
    assert await written(logins.owner, stream) == 0


async def test_rights_are_an_exact_type_or_a_prefix_before_a_final_percent(
    logins: Logins,
) -> None:
    """The owner grants an application's own types: an exact one to the worker, a prefix to
    the reviewer, each into `app:` streams; `_`, `%` and case elsewhere are characters."""
    owner = await asyncpg.connect(logins.owner)
    try:
        await owner.execute(
            "INSERT INTO event_rights (type_pattern, role, when_field, stream_prefix) VALUES"
            " ('app.step_one', 'signoff_app', '', 'app:'),"
            " ('app.%', 'signoff_reviewer', '', 'app:')"
        )
        for pattern, prefix in (("app.%.x", "app:"), ("app.%%", "app:"), ("", "app:")):
            with pytest.raises(asyncpg.CheckViolationError):
                await owner.execute(
                    "INSERT INTO event_rights VALUES ($1, 'signoff_app', '', $2)", pattern, prefix
                )
        with pytest.raises(asyncpg.CheckViolationError):  # a right names its streams
            await owner.execute("INSERT INTO event_rights VALUES ('app.x', 'signoff_app', '', '')")
    finally:
        await owner.close()
    assert await append(logins.worker, "app:1", "app.step_one") is None
    assert await append(logins.worker, "app:1/2", "app.step_one") is None
    for stream, type_ in (
        ("app:2", "app.stepXone"),
        ("app:2", "app.step_one.more"),
        ("app:2", "APP.step_one"),
        ("App:2", "app.step_one"),
        ("ap:2", "app.step_one"),
        ("app", "app.step_one"),
        ("app:2", "app.other"),  # the reviewer's prefix is not the worker's
    ):
        assert await append(logins.worker, stream, type_) == "SG401", (stream, type_)
        assert await written(logins.owner, stream) == 0
    assert await append(logins.reviewer, "app:3", "app.anything") is None
    assert await append(logins.reviewer, "app:4", "app.") is None
    for stream, type_ in (("app:5", "appXanything"), ("app:5", "app"), ("APP:5", "app.x")):
        assert await append(logins.reviewer, stream, type_) == "SG401", (stream, type_)
        assert await written(logins.owner, stream) == 0
