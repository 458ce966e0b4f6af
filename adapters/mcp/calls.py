"""One `tools/call` through the gateway: which run and call it is, its approval asked for and
waited on in MCP's terms, then the ledger runs it on its upstream (or replays it).

Runs and calls. The run is `mcp:<principal>:<conversation>`: the conversation is the client's
`_meta["io.signoff/run"]`, else the transport's session (an HTTP session, one gateway process
on stdio), else `default`. The call is the client's `_meta["io.signoff/call"]`, else, for a
write, a keyed digest of the tool and its arguments (the same write in one run is one call:
it runs once and then replays) and of a read that needs approval, else, for a read, a new id
(reads that ask nobody run every time).

Approvals. On 2026-07-28 a call that needs one answers `input_required` with a sealed
`requestState` naming it; on 2025-11-25 the gateway sends `elicitation/create` itself. Either
way the approval is consumed by the ledger's intent, in one transaction, and a state whose
call is in the ledger already is refused.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import mcp_types as types
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from adapters.runtime import ask, confirm_once, governed, judge, ready, run
from approvals import Approval, ApprovalError, ApprovalStatus, ApprovalStore, ApprovalTier
from approvals.policies import Outcome, PolicyPoint, RegisteredTool, Verdict
from ledger.calls.model import (
    CallContext,
    CallOutcome,
    CallStatus,
    Effect,
    ToolCall,
    ToolFailed,
)
from ledger.calls.service import ToolLedger
from ledger.errors import SignoffError
from ledger.keys import KeyRing
from ledger.log import get_logger

from .asking import APPROVAL_KEY, approval_url, decision_of_form, form_params, url_params
from .config import GatewayConfig
from .errors import (
    APPROVAL_REFUSED,
    CALL_REFUSED,
    OUTCOME_UNKNOWN,
    POLICY_REFUSED,
    UPSTREAM_REFUSALS,
    refused,
    signoff_refusal,
)
from .ids import IDEMPOTENCY_META, call_id_of, run_id_of
from .request_state import PendingCall, ready_to_seal
from .tasks import created, declares_tasks
from .upstreams import Route, Upstreams

__all__ = ["Gateway"]

log = get_logger(__name__)

_REFUSED_STATUS = {
    ApprovalStatus.REJECTED: "approval_rejected",
    ApprovalStatus.EXPIRED: "approval_expired",
    ApprovalStatus.CANCELLED: "approval_cancelled",
}

Answer = types.CallToolResult | types.InputRequiredResult | dict[str, Any]
"""A result, a request for input, or a task (`tasks.created`)."""


@dataclass
class Gateway:
    """The gateway's state: its config, upstreams and Signoff stores.

    Attributes:
        principal: who calls, on a transport that authenticates nobody (stdio); None: the
            bearer token's (HTTP).
        conversation: the conversation of a request without a session (one gateway process).
        policy: the policy decision point every call is judged by (None: the tools' own rules).
    """

    config: GatewayConfig
    upstreams: Upstreams
    store: ApprovalStore
    ledger: ToolLedger
    ring: KeyRing
    principal: str | None = None
    conversation: str = "default"
    policy: PolicyPoint | None = None

    def principal_of(self, ctx: ServerRequestContext[Any, Any] | None = None) -> str:
        """Who calls: the authenticated token's principal, else the configured one."""
        token = get_access_token()
        if token is not None:
            return token.client_id
        if self.principal is None:
            raise refused(CALL_REFUSED, "unauthenticated", "this gateway needs a bearer token")
        return self.principal

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> Answer:
        """Answer one `tools/call`: its result, a request for input, or a task.

        Raises:
            MCPError: refused (errors.py); a Signoff error is one too, in one line.
        """
        try:
            return await self._call_tool(ctx, params)
        except SignoffError as e:
            raise signoff_refusal(e) from None

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> Answer:
        route = self.upstreams.routes.get(params.name)
        if route is None:
            raise refused(CALL_REFUSED, "unknown_tool", f"no tool {params.name!r} here")
        args = dict(params.arguments or {})
        meta = dict(params.meta or {})
        who = self.principal_of(ctx)
        run_id = run_id_of(ctx, who, meta, self.conversation)
        if params.request_state is not None:
            call, approval = await self._resumed(route, run_id, args, params.request_state)
            verdict = await self.judge_call(route, call, who)
            route = replace(route, spec=governed(route.spec, verdict))
            if verdict.outcome is not Outcome.APPROVAL:  # a set published since denies or allows
                return await self.run_call(route, call, verdict=verdict, from_state=True)
        else:
            # Judged before its id is known: a read that needs an approval gets a stable id.
            verdict = await self.judge_call(route, ToolCall(run_id, "", route.spec.name, args), who)
            route = replace(route, spec=governed(route.spec, verdict))
            call_id = await call_id_of(self.ledger, self.store, route.spec, run_id, args, meta)
            call = ToolCall(run_id, call_id, route.spec.name, args)
            if verdict.outcome is not Outcome.APPROVAL:
                return await self.run_call(route, call, verdict=verdict)
            if (entry := await self.ledger.answering(run_id, call.call_id)) is not None:
                used = entry.approval_id and await self.store.get(entry.approval_id)
                return await self.run_call(route, call, used or None, verdict=verdict)
            approval = await ask(self.store, route.spec, call, requested_by=who, verdict=verdict)
        bound = log.bind(run_id=run_id, call_id=call.call_id, approval_id=approval.approval_id)
        if not ready(approval):
            if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
                answered = await self._modern_round(ctx, route, call, approval, params, who)
            else:
                answered = await self._legacy_round(ctx, route, call, approval)
            if not isinstance(answered, Approval):
                bound.info("call waits for its approval")
                return answered
            approval = answered
        bound.info("approval final", status=str(approval.status))
        from_state = params.request_state is not None
        return await self.run_call(route, call, approval, verdict=verdict, from_state=from_state)

    async def register_tools(self) -> None:
        """Register every tool this gateway serves, with its input schema: the schema the
        next published policy set is validated against."""
        if self.policy is None:
            return
        for route in self.upstreams.routes.values():
            effect = route.spec.effect or Effect.SINGLE_ATTEMPT
            await self.policy.register(
                RegisteredTool(route.spec.name, effect, route.tool.input_schema)
            )

    async def judge_call(self, route: Route, call: ToolCall, who: str) -> Verdict:
        """The policy's verdict on `call` (the tool's own rule without a point or a set)."""
        schema = route.tool.input_schema
        return await judge(self.policy, route.spec, call, who, args_schema=schema)

    async def run_approved(
        self, route: Route, call: ToolCall, approval: Approval, who: str
    ) -> types.CallToolResult:
        """Run a call whose approval is final, judged again: a set published since may deny
        it, or allow it outright (the approval then stays unused)."""
        verdict = await self.judge_call(route, call, who)
        route = replace(route, spec=governed(route.spec, verdict))
        used = approval if verdict.outcome is Outcome.APPROVAL else None
        return await self.run_call(route, call, used, verdict=verdict)

    async def _resumed(
        self, route: Route, run_id: str, args: dict[str, Any], state: str
    ) -> tuple[ToolCall, Approval]:
        """The call and approval a requestState names (the SDK checked its seal, expiry,
        principal, tool and arguments); refused when its call is in the ledger already."""
        pending = self._pending(state, run_id)
        call = ToolCall(run_id, pending.call_id, route.spec.name, args)
        if await self.ledger.answering(run_id, call.call_id) is not None:
            raise _state_used()
        approval = await self.store.get(pending.approval_id)
        if (approval.run_id, approval.call_id, approval.tool) != (run_id, call.call_id, call.tool):
            raise _foreign("call")
        return call, approval

    # -- one round of asking -------------------------------------------------------------------

    async def _modern_round(
        self,
        ctx: ServerRequestContext[Any, Any],
        route: Route,
        call: ToolCall,
        approval: Approval,
        params: types.CallToolRequestParams,
        principal: str,
    ) -> Approval | types.InputRequiredResult | dict[str, Any]:
        """2026-07-28: the answer in `inputResponses`, else ask; still pending: a task when
        the request declares tasks, else the state to come back with."""
        state = PendingCall(approval.approval_id, call.run_id, call.call_id).to_state()
        response = (params.input_responses or {}).get(APPROVAL_KEY)
        policy = route.spec.approval
        by_form = policy is not None and policy.tier is ApprovalTier.SELF_CONFIRM
        if by_form:
            if not isinstance(response, types.ElicitResult):
                if not _can_elicit(ctx, url=False):
                    raise self._unsupported(route, approval, by_form=True)
                form = types.ElicitRequest(params=form_params(route.spec, call.args))
                return await self._input_required({APPROVAL_KEY: form}, state)
            return await self._confirmed(route, call, approval, response)
        if isinstance(response, types.ElicitResult) and response.action != "accept":
            raise self._not_opened(approval)
        if params.request_state is None:
            if not _can_elicit(ctx, url=True):
                raise self._unsupported(route, approval, by_form=False)
            asked = url_params(self.config.public_url, route.spec, approval, with_id=False)
            return await self._input_required(
                {APPROVAL_KEY: types.ElicitRequest(params=asked)}, state
            )
        waited = await self.store.wait(approval.approval_id, self.config.wait_seconds)
        if ready(waited):
            return waited
        if declares_tasks(params.meta) and (task := await created(self, waited, call, principal)):
            return task
        return await self._input_required(None, state)

    async def _legacy_round(
        self, ctx: ServerRequestContext[Any, Any], route: Route, call: ToolCall, approval: Approval
    ) -> Approval:
        """2025-11-25: ask with `elicitation/create` now and wait for the answer."""
        policy = route.spec.approval
        by_form = policy is not None and policy.tier is ApprovalTier.SELF_CONFIRM
        if not _can_elicit(ctx, url=not by_form):
            raise self._unsupported(route, approval, by_form=by_form)
        try:
            if by_form:
                form = form_params(route.spec, call.args)
                result = await ctx.session.elicit_form(
                    form.message, form.requested_schema, related_request_id=ctx.request_id
                )
                return await self._confirmed(route, call, approval, result)
            asked = url_params(self.config.public_url, route.spec, approval, with_id=True)
            assert asked.elicitation_id is not None
            result = await ctx.session.elicit_url(
                asked.message, asked.url, asked.elicitation_id, related_request_id=ctx.request_id
            )
        except MCPError as e:
            raise refused(
                CALL_REFUSED, "elicitation_failed", f"the client cannot be asked: {e.message}"
            ) from None
        if result.action != "accept":
            raise self._not_opened(approval)
        waited = await self.store.wait(approval.approval_id, self.config.wait_seconds)
        if not ready(waited):
            raise MCPError(
                code=types.URL_ELICITATION_REQUIRED,
                message=f"{route.spec.name} is still waiting for a reviewer: call it again once "
                "the approval is decided",
                data=types.ElicitationRequiredErrorData(elicitations=[asked]).model_dump(
                    mode="json", by_alias=True, exclude_none=True
                ),
            )
        await ctx.session.send_elicit_complete(approval.approval_id, ctx.request_id)
        return waited

    async def _confirmed(
        self, route: Route, call: ToolCall, approval: Approval, response: types.ElicitResult
    ) -> Approval:
        """The self-confirm form's answer, recorded (a repeat of the same answer is one)."""
        if response.action == "cancel":
            raise refused(
                APPROVAL_REFUSED,
                "approval_dismissed",
                "the confirmation was dismissed; nothing ran (call again to be asked again)",
                approval_id=approval.approval_id,
            )
        try:
            decision = (
                decision_of_form(route.spec, call.args, response.content)
                if response.action == "accept"
                else decision_of_form(route.spec, call.args, {"approve": False})
            )
            return (await confirm_once(self.store, approval.approval_id, decision)).approval
        except (ValueError, ApprovalError) as e:
            raise refused(
                APPROVAL_REFUSED, "confirmation_refused", f"the confirmation was refused: {e}"
            ) from None

    async def _input_required(
        self, requests: types.InputRequests | None, state: str
    ) -> types.InputRequiredResult:
        await ready_to_seal(self.ring)  # the SDK seals the state once this returns
        return types.InputRequiredResult(input_requests=requests, request_state=state)

    # -- running -------------------------------------------------------------------------------

    async def run_call(
        self,
        route: Route,
        call: ToolCall,
        approval: Approval | None = None,
        *,
        verdict: Verdict | None = None,
        from_state: bool = False,
    ) -> types.CallToolResult:
        """Run (or replay) `call` under the policy's `verdict`, consuming `approval` (final) in
        its intent; `from_state`: a requestState's call, which must not replay (a concurrent
        request with the state ran it).

        Raises:
            MCPError: the approval refused it, or its outcome is unknown (`_answer`).
        """
        approval_id = None if approval is None else approval.approval_id

        async def on_upstream(args: dict[str, Any], context: CallContext) -> Any:
            meta = {IDEMPOTENCY_META: context.idempotency_key}
            try:
                result = await self.upstreams.call(route, args, meta)
            except MCPError as e:
                if e.code not in UPSTREAM_REFUSALS:  # a lost connection, a timeout: it may have run
                    raise
                raise ToolFailed(f"the upstream refused the call: {e.message}") from None
            return result.model_dump(mode="json", by_alias=True, exclude_none=True)

        async def again(judged: ToolCall) -> Verdict:
            return await judge(self.policy, route.spec, judged, self.principal_of())

        outcome = await run(
            self.ledger,
            self.store,
            route.spec,
            call,
            on_upstream,
            approval_id,
            verdict=verdict,
            judge_again=again,
        )
        if from_state and outcome.replayed:
            raise _state_used()
        return _answer(outcome, approval)

    def _pending(self, state: str, run_id: str) -> PendingCall:
        try:
            pending = PendingCall.from_state(state)
        except ValueError:
            raise refused(
                CALL_REFUSED, "invalid_request_state", "not a Signoff requestState"
            ) from None
        if pending.run_id != run_id:
            raise _foreign("run")
        return pending

    def _unsupported(self, route: Route, approval: Approval, *, by_form: bool) -> MCPError:
        """The spec forbids asking in a mode the client did not declare: say where instead."""
        where = approval_url(self.config.public_url, approval.approval_id)
        needs = (
            "a confirmation, and this client declared no form elicitation"
            if by_form
            else "a reviewer's approval, and this client declared no URL elicitation; it "
            f"waits at {where}: call again once it is decided"
        )
        return refused(
            CALL_REFUSED,
            "elicitation_unsupported",
            f"{route.spec.name} needs {needs}; nothing ran",
            approval_id=approval.approval_id,
        )

    def _not_opened(self, approval: Approval) -> MCPError:
        return refused(
            APPROVAL_REFUSED,
            "approval_not_opened",
            "the approval was not opened; nothing ran and it stays pending for reviewers",
            approval_id=approval.approval_id,
        )


def _can_elicit(ctx: ServerRequestContext[Any, Any], *, url: bool) -> bool:
    """Whether the client declared elicitation in this mode (an empty one is form mode)."""
    capabilities = ctx.session.client_capabilities
    have = capabilities.elicitation if capabilities is not None else None
    if have is None:
        return False
    return have.url is not None if url else have.form is not None or have.url is None


def _foreign(what: str) -> MCPError:
    return refused(CALL_REFUSED, "request_state_foreign", f"a requestState of another {what}")


def _state_used() -> MCPError:
    return refused(
        CALL_REFUSED,
        "request_state_used",
        "this requestState was used already; call the tool again without it",
    )


def _answer(outcome: CallOutcome, approval: Approval | None) -> types.CallToolResult:
    """The client's answer for what the ledger says of the call."""
    if outcome.status is CallStatus.SUCCEEDED:
        return types.CallToolResult.model_validate(outcome.result)
    if outcome.status is CallStatus.RESPONDED:
        text = f"A reviewer answered instead of running the tool: {outcome.result}"
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])
    if outcome.status is CallStatus.FAILED:
        text = f"The tool failed: {outcome.error}"
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], is_error=True
        )
    if outcome.status is CallStatus.DENIED and outcome.approval_id is None:
        raise refused(
            POLICY_REFUSED,
            "policy_denied",
            f"not run: Signoff's policy refused it: {outcome.error}",
        )
    if outcome.status is CallStatus.DENIED:
        status = approval.status if approval is not None else ApprovalStatus.REJECTED
        if status is ApprovalStatus.PENDING:  # ready while pending: its time ran out
            status = ApprovalStatus.EXPIRED
        reason = _REFUSED_STATUS.get(status, "approval_rejected")
        raise refused(
            APPROVAL_REFUSED,
            reason,
            f"not run: the approval was {status}: {outcome.error}",
            approval_id=outcome.approval_id,
        )
    raise refused(
        OUTCOME_UNKNOWN,
        "outcome_unknown",
        "the call may have run once and its outcome was not recorded; it will not run again "
        "until a reviewer resolves it (signoff ledger resolve)",
        call_id=outcome.call_id,
    )
