"""Checkpoint reads and writes as spans (`ledger.telemetry`), named by their thread: which
checkpoint a step read, and how long sealing and writing its state took. Values never."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from langchain_core.runnables import RunnableConfig
from opentelemetry.trace import Span

from ledger.telemetry import Attr, span

__all__ = ["READ_SPAN", "WRITES_SPAN", "WRITE_SPAN", "checkpoint_span"]

READ_SPAN: Final = "signoff.checkpoint.read"
WRITE_SPAN: Final = "signoff.checkpoint.write"
WRITES_SPAN: Final = "signoff.checkpoint.write_pending"


@contextmanager
def checkpoint_span(name: str, config: RunnableConfig) -> Iterator[Span]:
    thread = (config.get("configurable") or {}).get("thread_id")
    attributes = {Attr.THREAD_ID: str(thread)} if thread is not None else {}
    with span(name, attributes) as current:
        yield current
