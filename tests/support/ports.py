"""Loopback TCP ports nothing listens on: for a server a test starts on a port of its
choosing, or for an address that must refuse connections.

A port is bound, read and released: free when chosen, though another process may take it
before it is used (the kernel seldom hands the same one out again so soon)."""

from __future__ import annotations

import contextlib
import socket

__all__ = ["free_port", "free_ports"]


def free_port() -> int:
    """A loopback port free now."""
    [port] = free_ports(1)
    return port


def free_ports(count: int) -> list[int]:
    """`count` distinct loopback ports free now (held together while chosen, so no two are
    the same)."""
    with contextlib.ExitStack() as held:
        probes = [held.enter_context(socket.socket()) for _ in range(count)]
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [int(probe.getsockname()[1]) for probe in probes]
