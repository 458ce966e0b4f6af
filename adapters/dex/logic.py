"""What each Step and the decide RPC do, as plain async functions over the approval store and
the tool-call ledger, built on the adapters' runtime (`adapters.runtime`). The Dex wiring in
`flow.py` only calls these and turns their answers into Waits, movements and channel
messages, so everything here runs (and is tested) without a Dex server.

- `judge_call`: the policy decision point's verdict on a call (allow, deny or approval; the
  tool's own rule when no policy set is published), with the requester as principal. Each Step
  judges again, so a set published while a call waits governs it from then on.
- `await_approval`: record the request in the store (`ask`: the same request again returns the
  same approval) and say whether the call may go on (a final decision, or expired) or how long
  the Step should wait for the decision or the expiry.
- `record_decision` / `decide_for_flow`: record a decision in the store by the runtime's rule
  (`decide_once`): the same decision again by the same reviewer is a success that writes
  nothing, a different one is `DecisionConflict`.
- `call_tool`: run the call through the ledger (`run`) under its verdict, consuming the approval
  in the intent's transaction; a denial is recorded and nothing runs; the ledger replays a
  finished call and turns a write whose worker died into `outcome_unknown`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from adapters.runtime import (
    DecisionRecord,
    ToolSpec,
    ask,
    decide_once,
    governed,
    judge,
    ready,
    require_ready,
    run,
    task_run_id,
)
from adapters.runtime.policy import DATABASE_SETS, point_of, specs_by_name
from approvals import ApprovalStatus, ApprovalStore, Decision, InvalidApprovalRequest, Reviewer
from approvals.policies import Outcome, PolicyPoint, Verdict
from ledger.calls.model import CallContext, Effect, ToolCall, ToolFailed
from ledger.calls.service import ToolFunction, ToolLedger
from ledger.log import get_logger

from .errors import ApprovalNotForThisCall, RuntimeNotBound
from .values import DecideRequest, DecideResult, ToolCallRequest, ToolCallResult, channel_key

__all__ = [
    "ApprovalWait",
    "DecisionRecord",
    "DexTool",
    "SignoffDex",
    "await_approval",
    "call_tool",
    "decide_for_flow",
    "judge_call",
    "record_decision",
    "task_run_id",
]

log = get_logger(__name__)


@dataclass(frozen=True)
class DexTool:
    """A tool the Flow may run: its spec and its function.

    Attributes:
        spec: how Signoff treats it (name, effect, approval policy, once per run); an effect of
            None is single_attempt.
        fn: `async fn(args, context)`; `context.idempotency_key` is
            `<flowId>/<turnId>/<toolCallId>`, the same on every attempt.
        args_schema: the JSON Schema of its arguments, when known: registered for the policy
            sets published next (policies read only the `context.input` fields it declares)
            and given to reviewers with an approval a policy asks for.
    """

    spec: ToolSpec
    fn: ToolFunction
    args_schema: Mapping[str, Any] | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def effect(self) -> Effect:
        """The effect the ledger runs it with (the retry policy of its Step follows it)."""
        return self.spec.ledger_policy().effect


def _no_such_tool(name: str) -> DexTool:
    async def refuse(args: dict[str, Any], context: CallContext) -> None:
        raise ToolFailed(f"the agent has no tool named {name!r}")

    return DexTool(ToolSpec(name, Effect.READ), refuse)


@dataclass
class SignoffDex:
    """What the Steps and the RPC of a Worker use: one store, one ledger, the tools by name,
    and the policy decision point that judges every call (None: each tool's own rule).
    Open the store and the ledger once per process and share them."""

    store: ApprovalStore
    ledger: ToolLedger
    tools: Mapping[str, DexTool] = field(default_factory=dict)
    policy: PolicyPoint | None = None
    owns_policy: bool = False  # built by `of`: closed by `close`

    @classmethod
    def of(
        cls,
        store: ApprovalStore,
        ledger: ToolLedger,
        *tools: DexTool,
        policy: PolicyPoint | bool = True,
    ) -> SignoffDex:
        """The runtime of these tools.

        Args:
            policy: True (the default) builds a policy decision point on the ledger's database
                and key ring, so a published policy set governs every call (with none
                published, each tool's own rule decides as before); `close` closes it. A
                `PolicyPoint` is shared as it is (its owner closes it); False judges by each
                tool's own rule only.

        Raises:
            ValueError: two tools of one name.
        """
        specs_by_name(t.spec for t in tools)  # one tool of a name
        point, built = point_of(DATABASE_SETS if policy is True else policy or None, ledger)
        return cls(store, ledger, {t.name: t for t in tools}, point, built is not None)

    async def close(self) -> None:
        """Close the policy decision point `of` built (never the store, the ledger or a point
        it was given)."""
        if self.owns_policy and self.policy is not None:
            await self.policy.close()

    def tool(self, name: str) -> DexTool:
        """The tool of that name; an unknown name gets a read that records `failed`."""
        return self.tools.get(name) or _no_such_tool(name)


def require_runtime(runtime: SignoffDex | None, flow_type: str) -> SignoffDex:
    if runtime is None:
        raise RuntimeNotBound(
            f"Flow {flow_type} was built without a SignoffDex runtime; Workers need "
            "ToolCallFlow(SignoffDex.of(store, ledger, *tools))"
        )
    return runtime


# -- awaiting an approval ----------------------------------------------------------------------


@dataclass(frozen=True)
class ApprovalWait:
    """Where a call's approval stands.

    Attributes:
        ready: the call step may go on: a final decision, or the request expired (the call
            will be denied).
        timer: how long to wait for the expiry (whole seconds, as Dex timers need), or None
            when the policy never expires.
        channel_key: the decisions-channel instance the decide RPC signals.
    """

    approval_id: str
    status: ApprovalStatus
    ready: bool
    timer: timedelta | None
    channel_key: str


def _call(flow_id: str, request: ToolCallRequest) -> ToolCall:
    return ToolCall(flow_id, request.call_id, request.tool, request.args, turn_id=request.turn_id)


async def answered(
    ledger: ToolLedger, flow_id: str, request: ToolCallRequest, spec: ToolSpec
) -> bool:
    """Whether the ledger holds a final outcome that answers this call: its own, or for a
    once-per-run tool the run's call of that tool. `execute` only replays it, so nobody is
    asked to approve the call."""
    once = request.tool if spec.once_per_run else None
    record = await ledger.answering(flow_id, request.call_id, once)
    return record is not None and record.status.final


async def judge_call(
    policy: PolicyPoint | None, flow_id: str, request: ToolCallRequest, tool: DexTool
) -> Verdict:
    """The verdict on a call: the active policy set's (`policy`), or the tool's own rule when
    there is no point or no set. The principal is the requester the Flow records.

    Raises:
        DatabaseUnavailable: the database cannot be reached.
    """
    return await judge(
        policy,
        tool.spec,
        _call(flow_id, request),
        request.requested_by,
        args_schema=tool.args_schema,
    )


def governed_spec(tool: DexTool, verdict: Verdict) -> ToolSpec:
    """The tool's spec under `verdict`: the approval it requires (with the tool's argument
    schema for reviewers, when the approval has none of its own), else none."""
    spec = governed(tool.spec, verdict)
    if spec.approval is None or spec.approval.args_schema is not None or not tool.args_schema:
        return spec
    try:
        approval = replace(spec.approval, args_schema=dict(tool.args_schema))
    except InvalidApprovalRequest:  # a schema an approval cannot carry: reviewers go without
        log.warning("tool schema not stored with its approvals", tool=tool.name)
        return spec
    return replace(spec, approval=approval)


async def await_approval(
    store: ApprovalStore,
    flow_id: str,
    request: ToolCallRequest,
    spec: ToolSpec,
    *,
    now: datetime | None = None,
    verdict: Verdict | None = None,
) -> ApprovalWait:
    """Record the approval request of a call under `spec.approval` (once: the same request
    returns the same approval), with the verdict that asked for it, and say whether to go on
    or how long to wait."""
    approval = await ask(
        store,
        spec,
        _call(flow_id, request),
        request.requested_by,
        context=request.context,
        verdict=verdict,
    )
    now = now or datetime.now(UTC)
    timer = None
    if approval.expires_at is not None:
        remaining = (approval.expires_at - now).total_seconds()
        timer = timedelta(seconds=max(1, math.ceil(remaining)))
    return ApprovalWait(
        approval_id=approval.approval_id,
        status=approval.status,
        ready=ready(approval, now),
        timer=timer,
        channel_key=channel_key(request.call_id),
    )


# -- decisions ---------------------------------------------------------------------------------


async def record_decision(
    store: ApprovalStore, approval_id: str, decision: Decision, reviewer: Reviewer | str
) -> DecisionRecord:
    """Record `decision` unless this reviewer gave it already (`adapters.runtime.decide_once`).

    Raises:
        DecisionConflict: the approval holds another decision, expired or was cancelled.
        UnknownApproval, ApprovalExpired, DecisionNotAllowed, InvalidApprovalRequest: as
            `ApprovalStore.decide`.
    """
    return await decide_once(store, approval_id, decision, reviewer)


async def decide_for_flow(
    store: ApprovalStore, flow_id: str, request: DecideRequest
) -> DecideResult:
    """The decide RPC's store half: check that the approval belongs to this Flow and call,
    then record the decision (a repeated delivery is a success).

    Raises:
        ApprovalNotForThisCall, DecisionConflict, and what `record_decision` raises.
    """
    approval = await store.get(request.approval_id)
    if approval.run_id != flow_id or approval.call_id != request.call_id:
        raise ApprovalNotForThisCall(request.approval_id, flow_id, request.call_id)
    recorded = await record_decision(store, request.approval_id, request.decision, request.who)
    return DecideResult(
        approval_id=request.approval_id,
        status=recorded.approval.status,
        duplicate=recorded.duplicate,
    )


# -- running the call --------------------------------------------------------------------------


async def call_tool(
    ledger: ToolLedger,
    store: ApprovalStore,
    flow_id: str,
    request: ToolCallRequest,
    tool: DexTool,
    *,
    policy: PolicyPoint | None = None,
) -> ToolCallResult:
    """Run one call through `ToolLedger.execute` under its verdict (`judge_call`, judged here
    again): replayed when finished, run at most as often as its effect allows, with its
    approval (if the verdict requires one) consumed in the intent's transaction. An expired
    approval is consumed as a denial; a policy's denial is recorded with its reason and nothing
    runs.

    Raises:
        ApprovalPending: the verdict requires an approval that is neither decided nor expired.
        InvalidToolCall: malformed call, or the call id reused with other arguments.
        HistoryMoved: the run kept moving while the call was judged again and again.
    """
    call = _call(flow_id, request)
    bound = log.bind(run_id=flow_id, call_id=request.call_id, tool=request.tool)
    spec, verdict, approval_id = tool.spec, None, None
    # A call the ledger answers is only replayed: nobody judges or approves it again.
    if not await answered(ledger, flow_id, request, tool.spec):
        verdict = await judge_call(policy, flow_id, request, tool)
        spec = governed_spec(tool, verdict)
        bound = bound.bind(policy_outcome=str(verdict.outcome))
        if verdict.outcome is Outcome.APPROVAL:
            approval = await ask(
                store, spec, call, request.requested_by, context=request.context, verdict=verdict
            )
            require_ready(approval)
            approval_id = approval.approval_id
            bound = bound.bind(approval_id=approval_id)

    async def judge_again(again: ToolCall) -> Verdict:
        return await judge(policy, tool.spec, again, request.requested_by)

    outcome = await run(
        ledger, store, spec, call, tool.fn, approval_id, verdict=verdict, judge_again=judge_again
    )
    bound.info(
        "dex tool call done",
        status=str(outcome.status),
        replayed=outcome.replayed,
        attempts=outcome.attempts,
    )
    return ToolCallResult.of(outcome, call.idempotency_key)
