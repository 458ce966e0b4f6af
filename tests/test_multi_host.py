"""Multi-host database URLs (`postgresql://u@h1:p1,h2:p2/db?target_session_attrs=read-write`),
as a failover cluster is reached: both drivers (asyncpg for the library, psycopg for the
checkpointer) take the first host that is up and is what the URL asks for, and when none is,
or a connection drops, the caller meets `DatabaseUnavailable`, never a driver's own error. A
host that accepts connections and never answers (a frozen machine) holds each connection up
for `host_connect_seconds` only, then the next host is tried."""

from __future__ import annotations

import asyncio
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
from ledger.store.config import host_urls, masked, normalize_url
from ledger.store.db import open_raw_connection
from ledger.store.notify import Listener
from ledger.store.settings import Settings

from .support.ports import free_port, free_ports
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


def test_each_host_of_a_url_is_a_url_of_its_own() -> None:
    assert host_urls(f"{MULTI}?target_session_attrs=read-write") == [
        (f"postgresql://app:hunter2@{host}/signoff?target_session_attrs=read-write", host)
        for host in ("db1.example:5432", "db2.example:5433", "db3.example:5434")
    ]
    sockets = "postgresql://app@/signoff?host=/run/a,db2&port=5432,6432&sslmode=disable"
    assert host_urls(sockets) == [
        ("postgresql://app@/signoff?sslmode=disable&host=/run/a&port=5432", "/run/a:5432"),
        ("postgresql://app@/signoff?sslmode=disable&host=db2&port=6432", "db2:6432"),
    ]
    assert [name for _, name in host_urls("postgresql:///d?host=a,b&port=7")] == ["a:7", "b:7"]
    assert host_urls("postgresql://app@%2Frun%2Fa:5432,db2/d")[0][1] == "/run/a:5432"
    for one in ("postgresql://app@db1:5432/signoff", "postgresql://app@/d?host=/run/a&port=5"):
        assert host_urls(one) == [(one, host_urls(one)[0][1])]  # taken as it is
    mismatched = "postgresql://app@/d?host=a,b&port=1,2,3"  # asyncpg says why
    assert [url for url, _ in host_urls(mismatched)] == [mismatched]


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


class SilentHost:
    """A loopback listener that accepts connections and never answers: a frozen machine, as
    opposed to a stopped server, which refuses at once. `accepted` counts the connections."""

    def __init__(self) -> None:
        self.accepted = 0
        self._held: list[asyncio.StreamWriter] = []

    async def __aenter__(self) -> SilentHost:
        self._server = await asyncio.start_server(self._hold, "127.0.0.1", 0)
        self.port: int = self._server.sockets[0].getsockname()[1]
        self.spec = f"127.0.0.1:{self.port}"
        return self

    async def _hold(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self._held.append(writer)
        await reader.read()  # until the client gives up; nothing is ever sent

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        for writer in self._held:
            writer.close()
        await self._server.wait_closed()


def own_host(url: str) -> tuple[str, str]:
    """The host and port of the server `url` names (a socket URL's folder as the host)."""
    parts = urlsplit(url)
    params = dict(parse_qsl(parts.query))
    if "host" in params:
        return params["host"], params.get("port", "5432")
    return parts.hostname or "localhost", str(parts.port or 5432)


async def test_a_silent_first_host_holds_a_connection_up_for_its_own_timeout_only(
    own_url: str,
) -> None:
    """The silent host first, the real server second: every connection of the library (the
    probe and pool of `Database.connect`, a raw one, the shared LISTEN connection) and of the
    checkpointer's psycopg pool reaches the second host after the first's own timeout, not
    after asyncpg's 60 s for the whole list (the bound below fails it then, not hangs)."""
    settings = Settings(host_connect_seconds=1.0)
    async with asyncio.timeout(30), SilentHost() as silent:
        url = hosts_first(own_url, silent.spec)
        conn = await open_raw_connection(url, host_seconds=1.0)
        try:
            assert await conn.fetchval("SELECT NOT pg_is_in_recovery()")
        finally:
            await conn.close()
        assert silent.accepted == 1
        async with await Database.connect(url, pool_size=2, settings=settings) as db:
            async with db.transaction() as conn:
                assert await conn.fetchval("SELECT 1") == 1
            listener = Listener.shared(db, "signoff_multi_host")
            await listener.start()
            try:
                await listener.until_connected()
            finally:
                await listener.close()
            before = silent.accepted
            ring = await KeyRing.open(db, LocalKek(TEST_KEK))
            async with encrypted_checkpointer(db, ring, max_size=1) as saver:
                config: RunnableConfig = {
                    "configurable": {"thread_id": uuid.uuid4().hex, "checkpoint_ns": ""}
                }
                stored = await saver.aput(config, empty_checkpoint(), {}, {})
                found = await saver.aget_tuple(stored)
                assert found is not None and found.config == stored
            assert silent.accepted > before, "psycopg tried the silent host first"

        # The hosts given as a socket URL gives them (`?host=a,b&port=p,q`) are tried alike.
        host, port = own_host(own_url)
        parts = urlsplit(own_url)
        login = parts.netloc.rpartition("@")[0]
        query = {
            **{k: v for k, v in parse_qsl(parts.query) if k not in ("host", "port")},
            "host": f"127.0.0.1,{host}",
            "port": f"{silent.port},{port}",
            "target_session_attrs": "read-write",
        }
        listed = f"postgresql://{login}@{parts.path}?{urlencode(query, safe='/,')}"
        before = silent.accepted
        conn = await open_raw_connection(listed, host_seconds=1.0)
        await conn.close()
        assert silent.accepted == before + 1


async def test_every_host_silent_is_database_unavailable_naming_each(own_url: str) -> None:
    login = urlsplit(own_url).netloc.rpartition("@")[0]
    settings = Settings(host_connect_seconds=0.5)
    async with asyncio.timeout(20), SilentHost() as first, SilentHost() as second:
        url = f"postgresql://{login}@{first.spec},{second.spec}/signoff"
        with pytest.raises(DatabaseUnavailable) as caught:
            await Database.connect(url, pool_size=1, settings=settings)
    message = str(caught.value)
    assert "\n" not in message
    assert f"{first.spec}: no answer within 0.5 s; {second.spec}: no answer within 0.5 s" in message
    assert (first.accepted, second.accepted) == (1, 1)


async def test_the_first_host_of_the_kind_asked_for_wins(own_url: str) -> None:
    spec = urlsplit(hosts_first(own_url)).netloc.rpartition("@")[2]  # the server, as listed
    refused = f"127.0.0.1:{free_port()}"
    with pytest.raises(DatabaseUnavailable, match="no host matches the target attribute"):
        await open_raw_connection(hosts_first(own_url, spec, attrs="standby"))
    with pytest.raises(DatabaseUnavailable, match=f"{refused}: .*standby asks for"):
        await open_raw_connection(hosts_first(own_url, refused, attrs="standby"))
    # No standby among them: asyncpg's prefer-standby takes a host that answered.
    conn = await open_raw_connection(hosts_first(own_url, refused, spec, attrs="prefer-standby"))
    try:
        assert not await conn.fetchval("SELECT pg_is_in_recovery()")
    finally:
        await conn.close()
