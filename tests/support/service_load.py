"""What the tests of the service's metrics share: approvals to wait, calls to make, and a call
left `outcome_unknown`."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from approvals import ApprovalPolicy, ApprovalStore
from ledger.calls.model import CallContext, ToolCall
from ledger.calls.service import ToolLedger

from .http import unique
from .until import until

__all__ = ["ask", "done", "outcome_unknown"]


async def ask(store: ApprovalStore, tool: str, policy: ApprovalPolicy) -> str:
    """A new request for `tool` under `policy`; its approval id."""
    approval = await store.request(
        run_id=unique("gauge"),
        tool=tool,
        args={"amount": 120},
        call_id="c1",
        requested_by="support-agent",
        policy=policy,
    )
    return approval.approval_id


async def done(args: dict[str, Any], context: CallContext) -> str:
    """A tool that succeeds."""
    return "done"


async def outcome_unknown(ledger: ToolLedger, tool: str, within: float = 60) -> None:
    """A single-attempt call whose worker died while it ran, settled as `outcome_unknown` once
    its lease lapses by the server's clock (`ledger`'s lease: keep it short)."""
    call = ToolCall(unique("gauge"), "c1", tool, {"amount": 5})
    started = asyncio.Event()

    async def hangs(args: dict[str, Any], context: CallContext) -> str:
        started.set()
        await asyncio.sleep(3600)
        return "never"

    task = asyncio.ensure_future(ledger.execute(call, hangs))
    await started.wait()
    task.cancel()  # the worker dies with the call running
    with pytest.raises(asyncio.CancelledError):
        await task

    async def settled() -> bool:
        return await ledger.reap() == 1

    await until(settled, within, "the lapsed call settled as outcome_unknown")
