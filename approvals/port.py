"""The store-decided approval port (agent-adapter's `DeferredApproval`, backed by the store).

A paused graph resumes with nothing but "continue": whatever value the resume carries is ignored,
and the decision is read from the store and consumed there, once. Nobody who can only write a
resume value (or replay one) can approve anything.
"""

from __future__ import annotations

from typing import Any

from ledger.log import get_logger

from .model import Approval, ApprovalPolicy
from .store import ApprovalStore

__all__ = ["StoreDecidedApproval"]

log = get_logger(__name__)


class StoreDecidedApproval:
    """Ask through the store; settle from the store only."""

    def __init__(self, store: ApprovalStore) -> None:
        self.store = store

    async def ask(
        self,
        *,
        run_id: str,
        tool: str,
        args: dict[str, Any],
        call_id: str,
        requested_by: str,
        policy: ApprovalPolicy | None = None,
        thread_id: str | None = None,
        thread_config: dict[str, Any] | None = None,
    ) -> Approval:
        return await self.store.request(
            run_id=run_id,
            tool=tool,
            args=args,
            call_id=call_id,
            requested_by=requested_by,
            policy=policy,
            thread_id=thread_id,
            thread_config=thread_config,
        )

    async def settle(
        self, approval_id: str, task_run_id: str, resume_value: object = None
    ) -> Approval:
        """Consume the stored decision; `resume_value` never decides anything.

        Raises:
            ApprovalPending: nobody decided yet (resume again later).
            ApprovalAlreadyDecided: the decision was used already.
        """
        if resume_value is not None:
            log.info("resume value ignored: the store decides", approval_id=approval_id)
        return await self.store.consume(approval_id, task_run_id)
