"""Every tool call of a Pydantic AI run, through Signoff: the toolset wrapper a run's capability
puts around the agent's assembled toolset (its function tools, MCP servers, toolsets).

For each call (Pydantic AI refuses a response that repeats a tool call id before any runs,
pydantic-ai#5761): judge the call (the policy decision point, else the tool's spec; a tool made with
`requires_approval=True` asks through Signoff); when it needs approval and the ledger has not
run it, ask the store and defer it with `ApprovalRequired` (the run ends with
`DeferredToolRequests`); otherwise run it through `runtime.run`: replayed when finished, run at
most as its effect allows, the approval consumed in the intent, a denial recorded and its
reason returned to the model.

A resumed call arrives approved (`ctx.tool_call_approved`): it runs only if the resume named it
(`RunScope.resumed`: the approval the store holds for it and the arguments it was asked with),
and is judged again first. The resume's entry is used by that approved call only, once: a later
call that reuses the id is a call of its own.

Native tools (run by the model provider, never through a toolset) are refused before a model
request is sent (`Governing.before_model_request`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ApprovalRequired, CallDeferred, ModelRetry
from pydantic_ai.exceptions import ToolFailed as ModelToolFailed
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets import AbstractToolset, WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool
from pydantic_core import to_jsonable_python

from adapters.runtime import ask, governed, judge
from adapters.runtime import run as run_call
from approvals.policies import Outcome, Verdict
from ledger.calls.model import CallContext, CallOutcome, CallStatus, ToolCall, ToolFailed
from ledger.errors import UnknownCall

from .errors import UngovernedRun, UnsupportedNativeTool

if TYPE_CHECKING:
    from .runs import Signoff

__all__ = [
    "APPROVAL_KEY",
    "Resumed",
    "RunScope",
    "SignoffToolset",
    "model_text",
    "native_kinds",
]

APPROVAL_KEY = "signoff_approval_id"
"""The key of a deferred call's metadata that names its approval in Signoff's store."""


@dataclass(frozen=True)
class Resumed:
    """A call a resume lets run: its approval and the arguments it was asked with (the store's)."""

    approval_id: str
    args: dict[str, Any]


@dataclass(frozen=True)
class RunScope:
    """The Signoff run a Pydantic AI run belongs to: its id, who asks (the policy's principal and
    the approvals' requester) and, on a resume, the calls the store decided to run."""

    run_id: str
    requested_by: str
    resumed: Mapping[str, Resumed] = field(default_factory=dict)
    spent: set[str] = field(default_factory=set)
    """The resumed call ids used already (each entry of `resumed` is used once)."""

    def take_resumed(self, call_id: str) -> Resumed | None:
        """The resume's entry for an approved call `call_id`, the first time only."""
        if call_id in self.spent:
            return None
        self.spent.add(call_id)
        return self.resumed.get(call_id)


@dataclass
class SignoffToolset(WrapperToolset[Any]):
    """The agent's toolset, each call through Signoff under `scope`."""

    signoff: Signoff | None = None
    scope: RunScope | None = None
    asks: set[str] = field(default_factory=set)
    """Tools made with `requires_approval=True`: Signoff asks for them instead of Pydantic AI."""

    async def get_tools(self, ctx: RunContext[Any]) -> dict[str, ToolsetTool[Any]]:
        tools = await self.wrapped.get_tools(ctx)
        out: dict[str, ToolsetTool[Any]] = {}
        for name, tool in tools.items():
            if tool.tool_def.kind == "unapproved":
                # Pydantic AI would defer it without asking anyone: Signoff asks, then runs it.
                self.asks.add(name)
                tool = replace(tool, tool_def=replace(tool.tool_def, kind="function"))
            out[name] = tool
        return out

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        signoff, scope = self.signoff, self.scope
        if signoff is None or scope is None or not ctx.tool_call_id:
            raise UngovernedRun(f"{name} was called outside Signoff.run / Signoff.resume")
        call_id = ctx.tool_call_id
        spec = signoff.spec(name, asks=name in self.asks)
        resumed = scope.take_resumed(call_id) if ctx.tool_call_approved else None
        if ctx.tool_call_approved and resumed is None:
            raise UngovernedRun(
                f"call {call_id} ({name}) came approved, but not by a decision in Signoff's store"
            )
        args = resumed.args if resumed is not None else jsonable(tool_args)
        call = ToolCall(scope.run_id, call_id, name, args)
        schema = tool.tool_def.parameters_json_schema if signoff.point is not None else None
        verdict = await judge(signoff.point, spec, call, scope.requested_by, args_schema=schema)
        approval_id = None if resumed is None else resumed.approval_id
        if verdict.outcome is Outcome.APPROVAL and approval_id is None:
            try:
                await signoff.ledger.get(scope.run_id, call_id)  # recorded: replay it
            except UnknownCall:
                asked = await ask(
                    signoff.approvals, governed(spec, verdict), call, scope.requested_by,
                    verdict=verdict,
                )  # fmt: skip
                raise ApprovalRequired(metadata={APPROVAL_KEY: asked.approval_id}) from None

        async def fn(run_args: dict[str, Any], context: CallContext) -> Any:
            # The ledger's arguments (the asked ones, or a reviewer's edit) are what runs.
            validated = tool.args_validator.validate_python(
                run_args, context=ctx.validation_context
            )
            try:
                result = await self.wrapped.call_tool(name, validated, ctx, tool)
            except (ApprovalRequired, CallDeferred) as e:
                raise RuntimeError(
                    f"{name} deferred itself ({type(e).__name__}); tools run through Signoff "
                    "ask for approval through their spec instead"
                ) from None
            except (ModelRetry, ModelToolFailed) as e:
                raise ToolFailed(str(getattr(e, "message", e))) from None
            return jsonable(result)

        async def judge_again(again: ToolCall) -> Verdict:
            return await judge(signoff.point, spec, again, scope.requested_by)

        outcome = await run_call(
            signoff.ledger,
            signoff.approvals,
            governed(spec, verdict),
            call,
            fn,
            approval_id,
            verdict=verdict,
            judge_again=judge_again,
        )
        return model_result(outcome, name)


def jsonable(value: Any) -> Any:
    """`value` as JSON (what the ledger and the store keep, and a replay returns)."""
    return to_jsonable_python(value, serialize_unknown=True, bytes_mode="base64")


def model_text(outcome: CallOutcome, name: str) -> str:
    """What the model reads for an outcome that returned nothing from the tool."""
    status = outcome.status
    if status is CallStatus.DENIED and outcome.approval_id is None:
        return f"Signoff's policy refused the call to `{name}`: {outcome.error}. It did not run."
    if status is CallStatus.DENIED:
        return f"A reviewer rejected the call to `{name}`: {outcome.error}. It did not run."
    if status is CallStatus.OUTCOME_UNKNOWN:
        return (
            f"The outcome of the call to `{name}` is unknown: it may or may not have taken "
            f"effect ({outcome.error}). Do not call it again; a person will check and resolve it."
        )
    return f"The call to `{name}` failed: {outcome.error}"


def model_result(outcome: CallOutcome, name: str) -> Any:
    """The tool's result, or a failed tool result (`ToolFailed`) saying what happened."""
    if outcome.status in (CallStatus.SUCCEEDED, CallStatus.RESPONDED):
        return outcome.result
    raise ModelToolFailed(model_text(outcome, name))


@dataclass(init=False)
class Governing(AbstractCapability[Any]):
    """The per-run capability that wraps the agent's assembled toolset in `SignoffToolset`."""

    signoff: Signoff
    scope: RunScope

    def __init__(self, signoff: Signoff, scope: RunScope) -> None:
        self.signoff = signoff
        self.scope = scope

    def get_wrapper_toolset(self, toolset: AbstractToolset[Any]) -> AbstractToolset[Any] | None:
        return SignoffToolset(toolset, self.signoff, self.scope)

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Refuse native tools however they came (an override, a dynamic capability): the
        provider would run them past the toolset.

        Raises:
            UnsupportedNativeTool: the request carries native tools.
        """
        if kinds := native_kinds(request_context.model_request_parameters.native_tools):
            raise UnsupportedNativeTool(kinds)
        return request_context


def native_kinds(tools: Sequence[Any]) -> list[str]:
    """The kinds of native tools among `tools` that run calls at the provider: all but tool
    search (it only reveals the agent's own tools, which run through the toolset); a factory
    that makes one at run time counts as such."""
    kinds = [str(getattr(t, "kind", None) or type(t).__name__) for t in tools]
    return [k for k in kinds if k != _TOOL_SEARCH]


_TOOL_SEARCH = "tool_search"
