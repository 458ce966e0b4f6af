"""A TCP proxy on loopback in front of PostgreSQL that can lose answers: armed with a marker,
it lets the first statement whose text holds the marker (a prepared one, or a simple query
such as a transaction's `COMMIT;`) run to its end on the server (until the server is ready
for the next query: an autocommit statement, or that COMMIT, has committed), then ends the
connection without passing the answer on. What a client sees when the server fails over right
after committing its write. Armed with several markers, it loses one answer for each, in turn.
Connect through it with `sslmode=disable` (it reads the protocol).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

__all__ = ["CuttingProxy", "cutting_proxy"]

_READY = b"Z"  # ReadyForQuery
_PARSE, _EXECUTE, _QUERY = b"P", b"E", b"Q"


class CuttingProxy:
    """In front of the server of `url` (TCP, or a Unix socket named in its query)."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        query = parse_qs(parts.query)
        port = int(query.get("port", [parts.port or 5432])[0])
        self.socket = f"{query['host'][0]}/.s.PGSQL.{port}" if "host" in query else None
        self.upstream = (parts.hostname or "127.0.0.1", port)
        self.login, self.path = parts.netloc.rpartition("@")[0], parts.path
        self.port = 0
        self.markers: list[bytes] = []  # the next answer to lose: the first's
        self.cut = asyncio.Event()  # set once an answer was lost
        self.cuts = 0  # answers lost since armed

    @property
    def url(self) -> str:
        """The database's URL through this proxy."""
        netloc = f"{self.login}@127.0.0.1:{self.port}" if self.login else f"127.0.0.1:{self.port}"
        query = urlencode({"sslmode": "disable"})
        return urlunsplit(("postgresql", netloc, self.path, query, ""))

    def arm(self, *markers: bytes) -> None:
        """Lose the answer of the next statement holding the first marker; after it, of the
        next holding the second; and so on."""
        self.markers = list(markers)
        self.cut.clear()
        self.cuts = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.socket is not None:
            up_reader, up_writer = await asyncio.open_unix_connection(self.socket)
        else:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        state = {"parsed": False, "cutting": False}

        async def client_to_server() -> None:
            buffer, started = b"", False
            while data := await reader.read(65536):
                buffer += data
                while True:  # whole frontend messages: typed, after the untyped startup
                    head = 4 if not started else 5
                    if len(buffer) < head:
                        break
                    size = struct.unpack("!I", buffer[head - 4 : head])[0] + head - 4
                    if len(buffer) < size:
                        break
                    message, buffer = buffer[:size], buffer[size:]
                    kind = message[:1] if started else b""
                    started = True
                    if kind in (_PARSE, _QUERY) and self.markers and self.markers[0] in message:
                        del self.markers[0]
                        # A simple query's answer is the next; a prepared one's, its execution's.
                        state["cutting" if kind == _QUERY else "parsed"] = True
                    elif kind == _EXECUTE and state["parsed"]:
                        state["parsed"], state["cutting"] = False, True
                    up_writer.write(message)
                await up_writer.drain()

        async def server_to_client() -> None:
            buffer = b""
            while data := await up_reader.read(65536):
                if not state["cutting"]:
                    writer.write(data)
                    await writer.drain()
                    continue
                buffer += data
                while len(buffer) >= 5:  # the answer's messages, dropped until it is whole
                    size = struct.unpack("!I", buffer[1:5])[0] + 1
                    if len(buffer) < size:
                        break
                    kind, buffer = buffer[:1], buffer[size:]
                    if kind == _READY:
                        self.cuts += 1
                        self.cut.set()
                        return

        pumps = [asyncio.create_task(client_to_server()), asyncio.create_task(server_to_client())]
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            for w in (writer, up_writer):
                w.transport.abort()  # no goodbye: the connection is simply gone
            with contextlib.suppress(Exception):
                await asyncio.gather(*pumps, return_exceptions=True)


@asynccontextmanager
async def cutting_proxy(url: str) -> AsyncIterator[CuttingProxy]:
    """A proxy to the database of `url`; connect to `proxy.url`."""
    proxy = CuttingProxy(url)
    server = await asyncio.start_server(proxy._serve, "127.0.0.1", 0)
    proxy.port = server.sockets[0].getsockname()[1]
    try:
        yield proxy
    finally:
        server.close()
        await server.wait_closed()
