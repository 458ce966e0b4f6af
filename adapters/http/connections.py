"""Deadlines on what the service waits for from a client: uvicorn's HTTP/1.1 protocol (h11) with
a header-read timeout and an idle timeout.

uvicorn closes a keep-alive connection that stays silent after a response, but nothing bounds
a client that sends its request head a byte at a time, or that opens a connection and says
nothing: each such connection holds a socket and a slot for as long as the client likes. Here
a connection is closed when

- its request head is not complete `header_seconds` after the connection opened or the
  previous response ended (however steadily its bytes trickle), or
- the client sends nothing for `idle_seconds` while the service waits on it (for a request,
  or for the rest of a request's body).

While the service itself works on a request, or streams a response (event streams never end by
themselves), neither deadline runs.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from ledger.log import get_logger

__all__ = ["bounded_protocol"]

log = get_logger("adapters.http.connections")


class _BoundedH11Protocol(H11Protocol):
    header_seconds: float
    idle_seconds: float

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_timer: asyncio.TimerHandle | None = None
        self._idle_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._watch()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head()
        self._stop_idle()
        super().connection_lost(exc)

    def _watch(self) -> None:
        """Set the deadlines for what the client owes now: a request head (h11's IDLE: the
        head deadline keeps running across the bytes of one head) or a body (SEND_BODY); on
        any bytes the idle deadline starts again."""
        if self.transport.is_closing():
            return
        waiting_on_client = self.conn.their_state in (h11.IDLE, h11.SEND_BODY)
        if self.conn.their_state is h11.IDLE:
            if self._head_timer is None:
                self._head_timer = self.loop.call_later(self.header_seconds, self._head_late)
        else:
            self._stop_head()
        self._stop_idle()
        if waiting_on_client:
            self._idle_timer = self.loop.call_later(self.idle_seconds, self._idle_late)

    def _stop_head(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _stop_idle(self) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE:
            self._close("request head not complete in time", self.header_seconds)

    def _idle_late(self) -> None:
        self._idle_timer = None
        if self.flow.read_paused:  # the service is not reading yet: the client is not late
            self._idle_timer = self.loop.call_later(self.idle_seconds, self._idle_late)
        elif self.conn.their_state in (h11.IDLE, h11.SEND_BODY):
            self._close("client idle", self.idle_seconds)

    def _close(self, reason: str, seconds: float) -> None:
        if self.transport.is_closing():
            return
        self._stop_head()
        self._stop_idle()
        started = self.conn.their_state is not h11.IDLE or bool(self.conn.trailing_data[0])
        log.info("http connection closed", reason=reason, seconds=seconds, partial=started)
        self.transport.close()


def bounded_protocol(header_seconds: float, idle_seconds: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol with these deadlines (`Config(http=...)`)."""
    return type(
        "BoundedH11Protocol",
        (_BoundedH11Protocol,),
        {"header_seconds": header_seconds, "idle_seconds": idle_seconds},
    )
