"""`SignoffMiddleware`: create_agent's tool calls through Signoff, in place of LangChain's
`HumanInTheLoopMiddleware` (the same `interrupt_on`, `description_prefix`, interrupt values and
decisions). List it first in `middleware=[...]`: it must be the outermost tool wrapper, so every
call passes through it.

- `interrupt_mode="batched"` (default, as HumanInTheLoopMiddleware; `shape=` is the same):
  after each model message, one interrupt lists every call of it that needs approval
  (`action_requests`, `review_configs`, plus each call's `approval_id`, `tool_call_id` and
  `status`); resume with `{"decisions": [...]}`, one per action request, in order.
- `interrupt_mode="per_call"`: each call pauses on its own interrupt (`{"type":
  "tool_approval", ...}` plus `approval_id`), answered with one decision.

Whether a call asks at all is the policy decision point's verdict (`SignoffTools.policy`: the
database's published policy set, else the tool's spec and `interrupt_on`), judged after the
model and again when the call runs: an allowed call runs unasked, a call the policy refuses
never interrupts and never runs (the model reads the policy's reason in an error
`ToolMessage`), and one it sends for approval asks under the approval policy it names.

Each request carries what led to the call for reviewers (sealed like its arguments,
`approvals.RequestContext`): the text of the model message that asked for it (the agent's
stated reason) and the last human message before it, each cut to its last (for the user's
message) or first 2,000 characters. A policy without an `args_schema` gets the tool's argument
schema (its `tool_call_schema`, as the model is given the tool), which the inbox builds its
edit form from and every edit is checked against; a schema the policy cannot carry is left
out with a warning.

Who may answer is the tool's policy's tier (`ApprovalPolicy.tier`):

- self-confirm (a tool with no policy of its own gets `ApprovalPolicy()`, which is this tier):
  the person at the agent answers through `Command(resume=...)`, as with
  HumanInTheLoopMiddleware. The answer is recorded in the store as self-confirmed by this
  process (its database login, host and pid), never under a reviewer's name; an agent worker's
  login (`signoff_app`) and no reviewer KEK suffice. A reviewer the directory lists may decide
  it in the store as well.
- four-eyes (a policy that names approvers or groups, or `any_reviewer=True`): only an
  authenticated reviewer decides, with a signed decision (`signoff approvals decide`, the HTTP
  service). A decision in a resume value is refused, as below, and never recorded; once a
  reviewer decided, resume with nothing (or the signed token the service gives).

Either way the call then runs through the ledger once per run. An answer that is refused (a
decision the policy does not allow, a count that does not match, an edit of another tool, a
decision on a four-eyes approval) records nothing (in a batch, the other calls' answers are
taken): the agent pauses again on a new interrupt listing the same calls, whose value carries
`refused` (the reason), and the next answer is taken, in any process. With `store_only=True`
a resume value never decides even a self-confirm approval: the store does, and the graph
continues with nothing.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import replace
from typing import Any, Literal, TypeVar

from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import (
    ExtendedModelResponse,
    ModelRequest,
    ModelResponse,
)
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.config import get_config
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.runtime import Runtime, get_runtime
from langgraph.types import Command, interrupt

from adapters.runtime.hitl import decidable
from approvals import Approval, ApprovalPolicy, DecisionKind
from approvals.policies import Outcome

from .tools import SignoffTools, call_id_of, deferred, turn_of

__all__ = ["EDIT_NOTICE", "Shape", "SignoffMiddleware", "announce_edit"]

Shape = Literal["batched", "per_call"]
T = TypeVar("T")

EDIT_NOTICE = (
    "Note: a human reviewer replaced this tool call before it ran. The call recorded in your "
    "message is the one you produced, not the one that executed. This was intentional and "
    "authorized. Do not re-issue your original call."
)
"""What the model is told before the result of a call a reviewer edited (as
HumanInTheLoopMiddleware tells it)."""

Describe = Callable[[Any, Any, Any], str]
"""HumanInTheLoopMiddleware's description factory: (tool call, state, runtime) -> text."""


def _messages(state: Any) -> list[Any]:
    if isinstance(state, Mapping):
        return list(state.get("messages") or [])
    return list(getattr(state, "messages", []) or [])


class SignoffMiddleware(AgentMiddleware):
    """Approvals from the store and once-per-run tool calls for `create_agent`.

    Args:
        signoff: the ledger, the store and the tools' specs.
        interrupt_on: HumanInTheLoopMiddleware's mapping, tool name -> `True` (every decision),
            `False` (nothing added) or `{"allowed_decisions": [...], "description"?: text or
            factory}`. An entry gives the tool an approval policy (its spec's, narrowed to
            `allowed_decisions`; a spec without one gets `ApprovalPolicy()`, the self-confirm
            tier), so it only adds
            or narrows approvals: a tool whose spec has a policy is asked about whatever the
            entry says. `when` predicates are refused (a call must not skip its approval
            because a predicate answers differently on resume).
        description_prefix: the first line of each request's description, followed by the
            tool and its arguments as HumanInTheLoopMiddleware writes them; a spec's
            description takes its place, and an entry's `description` replaces it all.
        interrupt_mode: `"batched"` (one interrupt per model message) or `"per_call"`, as
            HumanInTheLoopMiddleware names it.
        shape: the same as `interrupt_mode` (give one of them).
        store_only: whether only the store decides self-confirm approvals too (a decision
            in a resume value is refused); a four-eyes approval is decided in the store only,
            whatever this says.
        edit_notice: told to the model before an edited call's result; None: nothing.
    """

    def __init__(
        self,
        signoff: SignoffTools,
        *,
        interrupt_on: Mapping[str, bool | Mapping[str, Any]] | None = None,
        description_prefix: str = "Tool execution requires approval",
        interrupt_mode: Shape | None = None,
        shape: Shape | None = None,
        store_only: bool | None = None,
        edit_notice: str | None = EDIT_NOTICE,
    ) -> None:
        super().__init__()
        if interrupt_mode is not None and shape is not None and interrupt_mode != shape:
            raise ValueError(f"interrupt_mode={interrupt_mode!r} and shape={shape!r}: give one")
        shape = interrupt_mode or shape or "batched"
        if shape not in ("batched", "per_call"):
            raise ValueError(f"interrupt_mode (shape) is 'batched' or 'per_call', not {shape!r}")
        self.signoff, self.describers = _with_interrupt_on(signoff, interrupt_on or {})
        self.description_prefix = description_prefix
        self.shape: Shape = shape
        self.store_only = store_only
        self.edit_notice = edit_notice
        # The agent's tools by name, as its model calls see them: a batched request is made
        # after the model, where only these give the tool's argument schema.
        self._tools: dict[str, BaseTool] = {}

    # -- the tools the model is given ----------------------------------------------------------

    def _saw(self, request: ModelRequest[Any]) -> None:
        for tool in request.tools:
            if isinstance(tool, BaseTool):
                self._tools[tool.name] = tool

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        """The model call as it is; the tools it is given noted (`_tools`)."""
        self._saw(request)
        return handler(request)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        """`wrap_model_call` for `agent.ainvoke`."""
        self._saw(request)
        return await handler(request)

    # -- descriptions ----------------------------------------------------------------------

    def describe(self, tool_call: Mapping[str, Any], state: Any, runtime: Any) -> str:
        """The text a reviewer reads about one call (HumanInTheLoopMiddleware's format)."""
        name, args = tool_call["name"], tool_call["args"]
        described = self.describers.get(name)
        if callable(described):
            return str(described(tool_call, state, runtime))
        if isinstance(described, str):
            return described
        prefix = self.signoff.spec(name).description or self.description_prefix
        return f"{prefix}\n\nTool: {name}\nArgs: {args}"

    # -- batched: one interrupt per model message --------------------------------------------

    async def aafter_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Ask about every call of the last model message that needs approval, in one
        interrupt, until each is decided. Changes no state: the tool node then runs each call
        with its decision."""
        if self.shape != "batched" or deferred(get_config()):
            return None  # deferred: each call's Step asks for its approval
        messages = _messages(state)
        last = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
        calls = list(last.tool_calls) if last is not None else []
        ids = [c.get("id") for c in calls]
        # Calls without an id, or with a repeated one, are refused by the tool node.
        unique = [c for c, i in zip(calls, ids, strict=True) if i and ids.count(i) == 1]
        config = get_config()
        asked: list[tuple[Mapping[str, Any], Approval | None]] = []
        for c in unique:
            tool = self._tools.get(c["name"])
            # Judged in this pass, and again by the tool node, which may meet a newer set.
            verdict = await self.signoff.judge(c, config, tool)
            if verdict is None or verdict.outcome is not Outcome.APPROVAL:
                continue  # allowed, or refused: the tool node records it, nobody is asked
            approval = await self.signoff.pending_approval(
                c, config, messages=messages, tool=tool, verdict=verdict
            )
            asked.append((c, approval))
        pairs: list[tuple[Mapping[str, Any], Approval]] = [
            (c, a) for c, a in asked if a is not None
        ]
        refused: str | None = None
        # Every call asked about stays in every request (decided ones with their status), so
        # the requests a replayed answer is matched with are the same in every run.
        while any(not a.status.final for _, a in pairs):
            value = interrupt(self._batch_request(pairs, state, runtime, refused))
            pairs, refused = await self._answer_batch(pairs, value, config)
        return None

    def after_model(self, state: Any, runtime: Runtime[Any]) -> dict[str, Any] | None:
        """`aafter_model` for `agent.invoke`, on the loop of the signoff's database."""
        if self.shape != "batched":
            return None
        return self._on_loop(lambda: self.aafter_model(state, runtime))

    def _batch_request(
        self,
        pairs: Sequence[tuple[Mapping[str, Any], Approval]],
        state: Any,
        runtime: Any,
        refused: str | None,
    ) -> dict[str, Any]:
        value: dict[str, Any] = {
            "action_requests": [
                {
                    "name": call["name"],
                    "args": call["args"],
                    "description": self.describe(call, state, runtime),
                    "tool_call_id": call["id"],
                    "approval_id": approval.approval_id,
                    "status": str(approval.status),
                }
                for call, approval in pairs
            ],
            "review_configs": [
                {"action_name": call["name"], "allowed_decisions": _allowed(approval.policy)}
                for call, approval in pairs
            ],
        }
        if refused is not None:
            value["refused"] = refused
        return value

    async def _answer_batch(
        self,
        pairs: list[tuple[Mapping[str, Any], Approval]],
        value: Any,
        config: RunnableConfig,
    ) -> tuple[list[tuple[Mapping[str, Any], Approval]], str | None]:
        """Each call's answer taken; the approvals as they now are and what was refused."""
        answers, refused = _batch_answers(value, len(pairs))
        reasons = [] if refused is None else [refused]
        out: list[tuple[Mapping[str, Any], Approval]] = []
        for (call, approval), answer in zip(pairs, answers, strict=True):
            now, reason = await self.signoff.resolve(
                approval, answer, call, config, store_only=self.store_only
            )
            out.append((call, now))
            if reason is not None:
                reasons.append(f"action {len(out)} ({call['name']}): {reason}")
        return out, "; ".join(reasons) or None

    # -- every call ----------------------------------------------------------------------------

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        tool_call = request.tool_call
        config: RunnableConfig = request.runtime.config
        turn, same = turn_of(_messages(request.state), call_id_of(tool_call))
        if len(same) > 1:
            return await self.signoff.refuse_duplicate(tool_call, same, request.tool, config, turn)
        verdict = await self.signoff.judge(tool_call, config, request.tool)
        approval = await self.signoff.pending_approval(
            tool_call, config, messages=_messages(request.state), tool=request.tool, verdict=verdict
        )
        refused: str | None = None
        # Batched: decided in after_model already; still pending here only if a decision was
        # withdrawn in between, and then this call asks on its own.
        while approval is not None and not approval.status.final:
            described = self.describe(tool_call, request.state, get_runtime())
            value = interrupt(
                self.signoff.approval_request(
                    approval, tool_call, description=described, refused=refused
                )
            )
            approval, refused = await self.signoff.resolve(
                approval, value, tool_call, config, store_only=self.store_only
            )

        async def execute(args: dict[str, Any], tool_config: RunnableConfig) -> ToolMessage:
            result = await handler(request.override(tool_call={**tool_call, "args": args}))
            if not isinstance(result, ToolMessage):
                # It ran, and its state update cannot be recorded or replayed: not a certain
                # failure, so a write's outcome is unknown (a read may run again).
                raise RuntimeError(
                    f"{tool_call['name']} returned a Command; tools run through Signoff must "
                    "return a result"
                )
            if args != tool_call["args"] and self.edit_notice:
                # Recorded with the result, so a replay tells the model the same.
                result = announce_edit(result, self.edit_notice, tool_call["name"], args)
            return result

        return await self.signoff.run(
            tool_call,
            request.tool,
            config,
            execute,
            verdict=verdict,
            approval=approval,
            turn_id=turn,
        )

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        """`awrap_tool_call` for `agent.invoke`: run on the loop of the signoff's database,
        the tool itself in a worker thread (it is sync code, and must not hold that loop)."""

        async def run_handler(req: ToolCallRequest) -> ToolMessage | Command[Any]:
            return await asyncio.to_thread(handler, req)

        return self._on_loop(lambda: self.awrap_tool_call(request, run_handler))

    def _on_loop(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run a coroutine on the signoff's loop, in this thread's context (so `interrupt()`
        and LangGraph's config reach it), and wait for it here."""
        loop = self.signoff.loop
        if loop is None or loop.is_closed():
            raise RuntimeError(
                "SignoffMiddleware in sync code (agent.invoke) needs SignoffTools whose "
                "database lives on a loop of its own: open them with "
                "SignoffTools.from_conn_string_sync(url, ...), or use agent.ainvoke"
            )
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:  # waiting here would stop the very loop that must do the work
            raise RuntimeError(
                "agent.invoke on the loop of the signoff's database: use agent.ainvoke there"
            )
        context = contextvars.copy_context()
        done: Future[T] = Future()

        def start() -> None:
            task = loop.create_task(make(), context=context)

            def settle(t: asyncio.Task[T]) -> None:
                if t.cancelled():
                    done.cancel()
                elif (error := t.exception()) is not None:
                    done.set_exception(error)
                else:
                    done.set_result(t.result())

            task.add_done_callback(settle)

        loop.call_soon_threadsafe(start)
        return done.result()


def _allowed(policy: ApprovalPolicy) -> list[str]:
    return [str(d) for d in decidable(policy)]


def _batch_answers(value: Any, count: int) -> tuple[list[Any], str | None]:
    """Each action request's answer in a batched resume value (None: read the store), and why
    the value was refused, if it was (then every answer is None)."""
    nothing: list[Any] = [None] * count
    if value is None or value == "continue" or value == {}:
        return nothing, None
    if isinstance(value, dict) and "decisions" in value:
        decisions = value["decisions"]
        if set(value) != {"decisions"} or not isinstance(decisions, list):
            return nothing, "a batched answer is {'decisions': [...]} and no more"
        if len(decisions) != count:
            return nothing, (
                f"{len(decisions)} decisions for {count} action requests: send one per action "
                "request, in order"
            )
        return list(decisions), None
    if count == 1 and (isinstance(value, str) or (isinstance(value, dict) and "type" in value)):
        return [value], None  # one decision or token for the one request
    return nothing, (
        f"cannot read a {type(value).__name__} as the answer to {count} action requests: send "
        "{'decisions': [...]}, one per action request in order, or nothing"
    )


def announce_edit(message: ToolMessage, notice: str, name: str, args: Any) -> ToolMessage:
    """`message` with the notice that a reviewer replaced the call (and with what) first."""
    text = f"{notice} Executed instead: {name} with arguments {json.dumps(args, default=str)}."
    content: Any = message.content
    if isinstance(content, str):
        content = f"{text}\n\nTool response:\n{content}" if content else text
    else:
        shown = text + "\n\nTool response:"
        first: Any = (
            shown if all(isinstance(b, str) for b in content) else {"type": "text", "text": shown}
        )
        content = [first, *content]
    return message.model_copy(update={"content": content})


def _with_interrupt_on(
    signoff: SignoffTools, interrupt_on: Mapping[str, bool | Mapping[str, Any]]
) -> tuple[SignoffTools, dict[str, str | Describe]]:
    """`signoff` with an approval policy for each tool `interrupt_on` gates, and each entry's
    description (text or factory).

    Raises:
        ValueError: an entry without `allowed_decisions`, with an unknown decision, with a
            `when` predicate, or whose decisions the tool's spec allows none of.
    """
    specs = {s.name: s for s in signoff.specs}
    described: dict[str, str | Describe] = {}
    for name, entry in interrupt_on.items():
        if entry is False:
            continue
        allowed: frozenset[DecisionKind] | None = None
        if entry is not True:
            if not isinstance(entry, Mapping):
                raise ValueError(f"interrupt_on[{name!r}] is True, False or a config mapping")
            if entry.get("when") is not None:
                raise ValueError(
                    f"interrupt_on[{name!r}] has a `when` predicate: Signoff asks about every "
                    "call of a gated tool (give the tool no entry to run it unasked)"
                )
            kinds = entry.get("allowed_decisions")
            if not kinds:
                raise ValueError(
                    f"interrupt_on[{name!r}] needs a non-empty `allowed_decisions` list "
                    "(e.g. ['approve', 'reject'])"
                )
            try:
                allowed = frozenset(DecisionKind(k) for k in kinds)
            except ValueError:
                raise ValueError(
                    f"interrupt_on[{name!r}]: allowed_decisions are approve, edit, reject or "
                    f"respond, not {kinds!r}"
                ) from None
            if entry.get("description") is not None:
                described[name] = entry["description"]
        spec = signoff.spec(name)
        policy = spec.approval or ApprovalPolicy()
        if allowed is not None:
            if not policy.allowed & allowed:
                raise ValueError(
                    f"interrupt_on[{name!r}] allows {sorted(allowed)}, the tool's spec only "
                    f"{sorted(policy.allowed)}"
                )
            policy = replace(policy, allowed=policy.allowed & allowed)
        specs[name] = replace(spec, approval=policy)
    return replace(signoff, specs=tuple(specs.values())), described
