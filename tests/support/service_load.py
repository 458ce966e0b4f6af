"""What the tests of the service's metrics share: approvals to wait, calls to make, and a call
left `outcome_unknown`."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ledger.calls.model import CallContext, ToolCall
from ledger.calls.service import ToolLedger

from .http import unique
from .until import until

__all__ = ["dies_running", "done", "outcome_unknown"]


async def done(args: dict[str, Any], context: CallContext) -> str:
    """A tool that succeeds."""
    return "done"


async def outcome_unknown(ledger: ToolLedger, tool: str, within: float = 60) -> None:
    """A single-attempt call whose worker died while it ran, settled as `outcome_unknown` once
    its lease lapses by the server's clock (`ledger`'s lease: keep it short)."""
    await dies_running(ledger, ToolCall(unique("gauge"), "c1", tool, {"amount": 5}))

    async def settled() -> bool:
        return await ledger.reap() == 1

    await until(settled, within, "the lapsed call settled as outcome_unknown")


async def dies_running(ledger: ToolLedger, call: ToolCall) -> None:
    """`call` started through `ledger`, then its worker dies with the tool running: the call
    stays `running` until its lease lapses."""
    started = asyncio.Event()

    async def hangs(args: dict[str, Any], context: CallContext) -> str:
        started.set()
        await asyncio.sleep(3600)
        return "never"

    task = asyncio.ensure_future(ledger.execute(call, hangs))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
