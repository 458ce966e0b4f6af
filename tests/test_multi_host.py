"""Multi-host database URLs (`postgresql://u@h1:p1,h2:p2/db?target_session_attrs=read-write`),
as a failover cluster is reached: both drivers (asyncpg for the library, psycopg for the
checkpointer) take the first host that is up and is what the URL asks for, and when none is,
or a connection drops, the caller meets `DatabaseUnavailable`, never a driver's own error."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint

from adapters.langgraph import encrypted_checkpointer
from ledger.errors import DatabaseUnavailable
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.config import masked, normalize_url
from ledger.store.db import open_raw_connection
from ledger.store.settings import Settings

from .support.ports import free_ports
from .support.processes import TEST_KEK
from .support.scratch import scratch_database

MULTI = "postgresql://app:hunter2@db1.example:5432,db2.example:5433,db3.example:5434/signoff"


def test_a_multi_host_url_is_kept_as_given() -> None:
    url = f"{MULTI}?target_session_attrs=read-write"
    assert normalize_url(url) == url
    assert normalize_url(url.replace("postgresql://", "postgresql+asyncpg://")) == url
    assert Settings.from_env({}, database_url=url).database_url == url


def test_a_multi_host_url_is_masked_with_every_host() -> None:
    shown = masked(f"{MULTI}?target_session_attrs=read-write&password=hunter3")
    assert "hunter2" not in shown and "hunter3" not in shown
    for password in ("se#cret", "se/cret", "se?cret", "se@cret:x"):
        hidden = masked(f"postgresql://app:{password}@db1:5432,db2:5432/signoff")
        assert hidden == "postgresql://app:***@db1:5432,db2:5432/signoff", hidden
    assert shown == (
        "postgresql://app:***@db1.example:5432,db2.example:5433,db3.example:5434/signoff"
        "?target_session_attrs=read-write&password=***"
    )


def hosts_first(url: str, *extra: str, attrs: str = "read-write") -> str:
    """`url` with `extra` hosts tried before its own, and `target_session_attrs=attrs`. A
    socket URL's `host` and `port` (the embedded server's) become its entry in the list, its
    folder percent-encoded, as both drivers read it."""
    parts = urlsplit(url)
    login, _, host = parts.netloc.rpartition("@")
    params = dict(parse_qsl(parts.query))
    if not host:
        host = f"{quote(params.pop('host'), safe='')}:{params.pop('port', '5432')}"
    netloc = f"{login}@" * bool(login) + ",".join([*extra, host])
    query = urlencode({**params, "target_session_attrs": attrs})
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


@pytest.fixture(scope="module")
async def own_url(server_url: str) -> AsyncIterator[str]:
    """A database of this module's own: a test below ends every connection to it."""
    async with scratch_database(server_url, prefix="signoff_multi") as url:
        yield url


async def test_both_drivers_skip_a_host_that_is_down(own_url: str) -> None:
    down = [f"127.0.0.1:{port}" for port in free_ports(2)]  # nothing listens on either
    url = hosts_first(own_url, *down)
    async with await Database.connect(url, pool_size=2) as db:
        async with db.transaction() as conn:
            assert await conn.fetchval("SELECT NOT pg_is_in_recovery()")
        ring = await KeyRing.open(db, LocalKek(TEST_KEK))
        async with encrypted_checkpointer(db, ring, max_size=2) as saver:
            config: RunnableConfig = {
                "configurable": {"thread_id": uuid.uuid4().hex, "checkpoint_ns": ""}
            }
            stored = await saver.aput(config, empty_checkpoint(), {}, {})
            found = await saver.aget_tuple(stored)
            assert found is not None and found.config == stored


async def test_no_host_of_the_kind_asked_for_is_database_unavailable(own_url: str) -> None:
    """What a failover looks like from the client: the standbys answer, none is the primary
    yet (here: the one server is a primary, and the URL asks for a standby)."""
    url = hosts_first(own_url, attrs="standby")
    with pytest.raises(DatabaseUnavailable, match="target attribute"):
        await open_raw_connection(url)
    with pytest.raises(DatabaseUnavailable):
        await Database.connect(url, pool_size=1)


async def test_a_checkpoint_connection_lost_is_database_unavailable(own_url: str) -> None:
    async with await Database.connect(own_url, pool_size=2) as db:
        ring = await KeyRing.open(db, LocalKek(TEST_KEK))
        async with encrypted_checkpointer(db, ring, max_size=1) as saver:
            config: RunnableConfig = {
                "configurable": {"thread_id": uuid.uuid4().hex, "checkpoint_ns": ""}
            }
            stored = await saver.aput(config, empty_checkpoint(), {}, {})
            killer = await open_raw_connection(own_url)
            try:  # every other session on this database: the saver's pooled connection too
                ended = await killer.fetchval(
                    "SELECT count(*) FROM ("
                    " SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()) t"
                )
            finally:
                await killer.close()
            assert ended >= 1
            with pytest.raises(DatabaseUnavailable):
                await saver.aget_tuple(stored)
            assert await saver.aget_tuple(stored) is not None  # the pool replaced it
