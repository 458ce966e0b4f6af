"""Deciding an approval from outside the Flow (a review UI, a CLI, a chat bot).

`decide_approval` records the decision in the store first, so it holds even if Dex is
unreachable, then invokes the Flow's decide RPC to wake the waiting Step. Delivering the same
decision again is harmless, so the RPC is retried on transient Dex errors and the whole helper
may be called again after any failure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol, cast

from dex import AsyncClient, Context, DexServiceError, RequestTimeoutError, RPCInvokeOptions
from dex import RPCResult as DexRPCResult

from approvals import ApprovalStore, Decision, Reviewer
from ledger.log import get_logger

from .flow import DECISIONS
from .logic import record_decision
from .values import DecideRequest, DecideResult, channel_key

__all__ = ["DecidingFlow", "decide_approval"]

log = get_logger(__name__)
_TRANSIENT = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED"})  # gRPC status code names
DecideRpc = Callable[[Context, DecideRequest], DexRPCResult[DecideResult]]


class DecidingFlow(Protocol):
    """A Flow with the decide RPC: `ToolCallFlow`, `AgentSessionFlow`."""

    async def decide(
        self, context: Context, request: DecideRequest
    ) -> DexRPCResult[DecideResult]: ...


def _transient(error: DexServiceError) -> bool:
    return isinstance(error, RequestTimeoutError) or getattr(error.code, "name", "") in _TRANSIENT


async def decide_approval(
    client: AsyncClient,
    flow: DecidingFlow,
    store: ApprovalStore,
    approval_id: str,
    decision: Decision,
    reviewer: Reviewer | str,
    *,
    attempts: int = 3,
    backoff_seconds: float = 0.5,
) -> DecideResult:
    """Record a reviewer's decision in the store, then deliver it to the waiting Flow.

    Args:
        client: a Dex client whose Registry holds `flow` (the same instance).
        flow: the Flow the approval's call runs in (its Flow ID is the approval's run id).
        attempts: how often to invoke the RPC on transient Dex errors (it is idempotent).

    Returns:
        The RPC's result; `duplicate` says whether the store held this decision before.

    Raises:
        DecisionConflict: the approval holds another decision, expired or was cancelled.
        UnknownApproval, DecisionNotAllowed, ApprovalExpired: as `ApprovalStore.decide`.
        DexServiceError: Dex refused the RPC (for example the Flow is no longer running);
            the decision stays recorded in the store.
    """
    if attempts < 1:
        raise ValueError("attempts must be at least 1")
    approval = await store.get(approval_id)
    recorded = await record_decision(store, approval_id, decision, reviewer)
    request = DecideRequest.of(approval, decision, reviewer)
    options = RPCInvokeOptions(
        load_channel_map_instances=(DECISIONS.load_messages(channel_key(approval.call_id)),)
    )
    # The SDK's invoke_rpc overloads describe synchronous handlers; ours is async (served by
    # an AsyncWorker), which the SDK accepts at run time.
    decide = cast(DecideRpc, flow.decide)
    bound = log.bind(run_id=approval.run_id, call_id=approval.call_id, approval_id=approval_id)
    attempt = 1
    while True:
        try:
            result = await client.invoke_rpc(decide, approval.run_id, request, options=options)
        except DexServiceError as e:
            if attempt >= attempts or not _transient(e):
                raise
            bound.warning("decide RPC failed; retrying", attempt=attempt, code=str(e.code))
            await asyncio.sleep(backoff_seconds * attempt)
            attempt += 1
            continue
        return replace(result, duplicate=recorded.duplicate)
