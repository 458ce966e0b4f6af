"""Asking for approval: requests (idempotent, sealed arguments) and sticky grants.

A request writes its row and its `approval.requested` event in one statement; a sticky grant
for the run and tool whose policy lets the granter alone approve decides it at once. New
requests NOTIFY `signoff_approval_requests` (reviewers' feeds).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import asyncpg

from ledger.canonical import jcs_json
from ledger.journal import NewEvent
from ledger.keys.attest import sign_statement, statement_ok
from ledger.keys.digests import text_digest, value_digests

from . import _sql
from .context import RequestContext
from .core import _KEPT, StoreCore, _reviewer, _text, log
from .errors import (
    InvalidApprovalRequest,
)
from .integrity import (
    grant_statement,
)
from .model import (
    MAX_ARGS_BYTES,
    Approval,
    ApprovalPolicy,
    DecisionKind,
    Review,
    Reviewer,
    binding_of,
    expiry,
    has_float,
    json_object,
)
from .policy import policy_problem
from .records import row_to_approval
from .reviewers import directory_groups

__all__ = ["Requests"]


class Requests(StoreCore):
    """Requests and sticky grants."""

    async def request(
        self,
        *,
        run_id: str,
        tool: str,
        args: dict[str, Any],
        call_id: str,
        requested_by: str,
        policy: ApprovalPolicy | None = None,
        thread_id: str | None = None,
        kind: str = "tool_call",
        thread_config: dict[str, Any] | None = None,
        context: RequestContext | None = None,
        policy_stamp: Mapping[str, Any] | None = None,
        connection: asyncpg.Connection | None = None,
    ) -> Approval:
        """Ask for approval of one call. The same (run, call id, arguments) returns the same
        approval, whatever its context. A sticky grant for this run and tool approves it at
        once.

        `context` (what led to the call: the agent's reason, the user's last message) is
        sealed into the request like the arguments; a reveal opens it.

        `policy_stamp` (the policy decision that asked for it: `PolicyStamp.to_json()`) is
        recorded in the request as `policy_decision`.

        Raises:
            InvalidApprovalRequest: empty ids, arguments or config that are not JSON objects,
                text or JSON that cannot be stored (`ledger.limits`), arguments of more than
                `MAX_ARGS_BYTES`, a context that is no `RequestContext`.
        """
        for value, what in (
            (run_id, "run_id"),
            (tool, "tool"),
            (call_id, "call_id"),
            (requested_by, "requested_by"),
            (kind, "kind"),
        ):
            _text(value, what)
        if thread_id is not None:
            _text(thread_id, "thread_id")
        args_text = json_object(args, "args", MAX_ARGS_BYTES)
        if thread_config is not None:
            json_object(thread_config, "thread config")
            if has_float(thread_config):  # jsonb would turn 1e23 into another number
                raise InvalidApprovalRequest("a thread config holds no floats")
        if context is not None and not isinstance(context, RequestContext):
            raise InvalidApprovalRequest(f"not a RequestContext: {type(context).__name__}")
        policy = policy or ApprovalPolicy()
        if not isinstance(policy, ApprovalPolicy):
            raise InvalidApprovalRequest(f"not an ApprovalPolicy: {type(policy).__name__}")
        json_object(policy.to_json(), "policy")
        expiry(policy, datetime.now(UTC))  # refuses an expiry out of range before any write
        mark = self._listener.mark() if connection is None else None
        # No transaction of its own: the row and its events are one statement, and a request
        # that loses the race to an identical one reads the winner's row afterwards. The ring
        # readied for the digests, the sealed arguments and the MACs.
        async with self.ring.sealing(), self.db.connection(connection) as conn:
            digest = text_digest(self.ring, args_text)
            # The same request may be recorded under an older value-MAC key: look for every form.
            known = value_digests(self.ring, args_text)
            now = datetime.now(UTC)
            found = await conn.fetchrow(
                _sql.BY_REQUEST_WITH_GRANT, run_id, call_id, known, tool, now
            )
            if found["approval_id"] is not None:
                return row_to_approval(found)
            approval_id = f"apr-{uuid.uuid4().hex}"
            expires_at = expiry(policy, now)
            requested = {
                "run_id": run_id,
                "thread_id": thread_id,
                "tool": tool,
                "kind": kind,
                "call_id": call_id,
                "args_digest": digest,
                "args_sealed": self.records.seal(args_text, approval_id, "args"),
                "binding": binding_of(run_id, tool, kind, digest, call_id, approval_id),
                "policy": policy.to_json(),
                "thread_config": thread_config,
                "requested_at": now.isoformat(),
                "expires_at": None if expires_at is None else expires_at.isoformat(),
            }
            if policy_stamp is not None:
                requested["policy_decision"] = dict(policy_stamp)
            if context is not None and not context.empty:  # absent: a request as before
                requested["context_sealed"] = self.records.seal(
                    context.sealed_text(), approval_id, "context"
                )
            events = [NewEvent("approval.requested", requested, actor=requested_by)]
            if found["active_grant"] is not None:
                review = await self._granted(conn, found["active_grant"], policy, requested_by, now)
                if review is not None:
                    decided = review.to_json() | {"final": True, "decided_by": [review.reviewer]}
                    events.append(NewEvent("approval.decided", decided, actor=review.reviewer))
            approval = await self.records.commit(conn, approval_id, None, events)
            if approval is None:  # another process asked the same question a moment ago
                row = await conn.fetchrow(_sql.BY_REQUEST, run_id, call_id, known)
                return row_to_approval(row)
        if mark is not None:
            if len(self._requested) >= _KEPT:  # the oldest, never waited for, go first
                del self._requested[next(iter(self._requested))]
            self._requested[approval_id] = (approval, mark)
        log.info(
            "approval requested",
            approval_id=approval_id,
            run_id=run_id,
            call_id=call_id,
            tool=tool,
            status=str(approval.status),
        )
        return approval

    async def grant(
        self, *, run_id: str, tool: str, until: datetime, granted_by: Reviewer | str
    ) -> str:
        """A sticky grant: requests for `tool` in `run_id` whose policy lets `granted_by` approve
        them (quorum 1) are approved until `until`. Signed by the reviewer side.

        Raises:
            ReviewerKekMissing: this store's ring cannot sign (an agent worker's).
        """
        who = _reviewer(granted_by)
        _text(run_id, "run_id")
        _text(tool, "tool")
        if not isinstance(until, datetime) or until.tzinfo is None:
            raise InvalidApprovalRequest("`until` must be timezone-aware")
        async with self.db.connection() as conn:  # the granter's groups: the directory's
            who = await self._from_directory(conn, who.id)
        grant_id = f"grant-{uuid.uuid4().hex}"
        now = datetime.now(UTC)
        data: dict[str, Any] = {
            "grant_id": grant_id,
            "run_id": run_id,
            "tool": tool,
            "granted_by": who.id,
            "groups": sorted(who.groups),
            "at": now.isoformat(),
            "until": until.isoformat(),
        }
        async with self.ring.sealing():
            self.ring.require_decision_signer()
            data["signature"] = sign_statement(self.ring, grant_statement(data))
        granted_by = who.id
        async with self.db.connection() as conn:  # the row and its `grant:<id>` event, at once
            await conn.execute(
                _sql.GRANT, grant_id, run_id, tool, granted_by, now, until, jcs_json(data)
            )
        return grant_id

    async def _granted(
        self,
        conn: asyncpg.Connection,
        grant_id: str,
        policy: ApprovalPolicy,
        requested_by: str,
        now: datetime,
    ) -> Review | None:
        """The approval a sticky grant gives a new request: its signed grant checked, and its
        policy allowing the grant's reviewer alone; else None (the request waits)."""
        events = await self.journal.read_stream(f"grant:{grant_id}", connection=conn)
        grant = events[0].data if events and events[0].type == "approval.granted" else None
        if grant is None or "signature" not in grant:
            log.warning("sticky grant unsigned: not used", grant_id=grant_id)
            return None
        why = await statement_ok(self.ring, grant_statement(grant), grant["signature"])
        if why is not None:
            log.warning("sticky grant refused", grant_id=grant_id, problem=why)
            return None
        review = Review(
            grant["granted_by"],
            DecisionKind.APPROVE,
            now,
            grant_id=grant_id,
            groups=tuple(grant["groups"]),
            grant=grant,
        )
        # A policy that names no approvers admits the granter only while the directory lists it.
        listed = await directory_groups(conn, review.reviewer) is not None
        refusal = policy_problem(
            policy,
            review.decision,
            Reviewer(review.reviewer, frozenset(review.groups), listed=listed),
            earlier_approvers=(),
            requested_by=requested_by,
            at=now,
            expires_at=None,
        )
        if policy.quorum > 1 or refusal is not None:
            return None
        return review

    async def _from_directory(self, conn: asyncpg.Connection, rid: str) -> Reviewer:
        """The reviewer with its directory groups (none when it is not in the directory)."""
        return Reviewer(rid, await directory_groups(conn, rid) or frozenset())
