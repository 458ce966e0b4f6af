"""Tool calls of LangGraph agents, run through Signoff: the logic the middleware and the tool
node share.

For each tool call: the policy decision point judges it (`policy`: the published policy sets
of the database, else the tool's spec); replay it if the ledger has it; if the verdict requires
approval, ask the store and pause with `interrupt()` until a decision exists (from the resume
value, recorded as self-confirmed by this process on a self-confirm approval, or from the store
when the graph resumes with nothing: a four-eyes approval is decided by a reviewer there); then
the runtime's `run` consumes the decision and records the intent in one transaction, runs the
tool once, and records the outcome. A call the policy refuses never pauses: it is recorded as
denied, with the policy's reason, and never runs. The model gets a `ToolMessage` for every
outcome. A call is judged again each time the graph runs it (a resume re-runs the node): a set
published in between decides it.

Run ids: `configurable["signoff_run_id"]`, else the thread id. Call ids: the model's tool call
ids, which must be unique within a run (a repeated id with other arguments is refused, with the
same arguments it replays).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.errors import GraphBubbleUp

from adapters.runtime import (
    DecisionConflict,
    ToolSpec,
    ask,
    confirm_once,
    effect_of_hints,
    governed,
    judge,
)
from adapters.runtime import run as run_call
from adapters.runtime.documents import description_of
from adapters.runtime.hitl import decidable, hitl_decision, one_decision
from adapters.runtime.policy import DATABASE_SETS, PolicyChoice, point_of, specs_by_name
from approvals import (
    Approval,
    ApprovalAlreadyDecided,
    ApprovalExpired,
    ApprovalPolicy,
    ApprovalStore,
    ApprovalTier,
    DecisionNotAllowed,
    InvalidApprovalRequest,
)
from approvals.errors import TokenError, UnknownReviewer
from approvals.policies import Outcome, PolicyPoint, Verdict
from ledger.calls.model import CallContext, CallOutcome, CallStatus, Effect, ToolCall, ToolFailed
from ledger.calls.service import ToolLedger
from ledger.errors import UnknownCall
from ledger.keys import KeyRing
from ledger.log import get_logger
from ledger.store.db import Database
from ledger.store.settings import Settings

from ._loop_thread import held_on_loop_thread
from .errors import InvalidResume, ToolOutsideStep
from .request_context import request_context, tool_args_schema, with_args_schema

__all__ = [
    "DATABASE_SETS",
    "DEFERRED",
    "IDEMPOTENCY_KEY",
    "RUN_ID",
    "SignoffTools",
    "ToolSpec",
    "call_id_of",
    "effect_of",
    "get_idempotency_key",
    "resume_config",
    "turn_of",
]

IDEMPOTENCY_KEY = "signoff_idempotency_key"
RUN_ID = "signoff_run_id"
REQUESTED_BY = "signoff_requested_by"
DEFERRED = "signoff_deferred_tools"
"""Set (True) in `configurable` when every tool call runs outside the graph first (a Dex
agent session): the graph only replays outcomes the ledger has, asks nobody and runs nothing."""
log = get_logger(__name__)

Execute = Callable[[dict[str, Any], RunnableConfig], Awaitable[ToolMessage]]
"""Runs the tool itself with these arguments and config; returns its message."""


def effect_of(tool: BaseTool | None, spec: ToolSpec) -> Effect:
    """The spec's effect, else the MCP annotations the tool carries in its metadata
    (`readOnlyHint` -> read, `idempotentHint` -> idempotent_write), else single-attempt."""
    if spec.effect is not None:
        return spec.effect
    metadata: Mapping[str, Any] = (tool.metadata or {}) if tool is not None else {}
    return effect_of_hints({**metadata, **(metadata.get("annotations") or {})})


_current_key: ContextVar[str | None] = ContextVar("signoff_idempotency_key", default=None)


def get_idempotency_key(config: RunnableConfig | None = None) -> str | None:
    """The idempotency key (`<run>/<turn>/<call id>`) of the call a tool is running for; pass it
    to systems that deduplicate requests. Same on every attempt. Read from the tool's
    `RunnableConfig`, else from the call this task is running."""
    configurable = (config or {}).get("configurable") or {}
    key = configurable.get(IDEMPOTENCY_KEY)
    return key if isinstance(key, str) else _current_key.get()


def call_id_of(tool_call: Mapping[str, Any]) -> str:
    """The model's id for a tool call; a call without one cannot be matched to its result."""
    call_id = tool_call.get("id")
    if not call_id:
        raise InvalidResume(f"the call to {tool_call.get('name')!r} has no id")
    return str(call_id)


def turn_of(messages: list[Any], tool_call_id: str) -> tuple[str, list[Mapping[str, Any]]]:
    """The model turn (1-based count of AI messages up to the one that asked for this call)
    and the calls with this id in that message (more than one: the model repeated the id)."""
    turn = 0
    for message in messages:
        if isinstance(message, AIMessage):
            turn += 1
            same = [c for c in message.tool_calls if c.get("id") == tool_call_id]
            if same:
                return str(turn), list(same)
    return str(turn), []


def deferred(config: RunnableConfig) -> bool:
    """Whether the calls of this graph run outside it (`DEFERRED`)."""
    return bool((config.get("configurable") or {}).get(DEFERRED))


def run_id_of(config: RunnableConfig) -> str:
    configurable = config.get("configurable") or {}
    run_id = configurable.get(RUN_ID) or configurable.get("thread_id")
    if not run_id:
        raise InvalidResume("Signoff needs a thread_id (or signoff_run_id) in the config")
    return str(run_id)


# What resumes a thread: the root graph's thread (and Signoff run). Not the `checkpoint_ns` a
# tool sees: it names the tool's own task ("tools:<task id>"), with which `aget_state` finds
# nothing and LangGraph drops a `checkpoint_id` given alongside it.
_RESUME_KEYS = ("thread_id", RUN_ID)


def resume_config(approval: Approval) -> RunnableConfig:
    """The config that resumes the thread an approval paused (stored with the approval)."""
    stored = (approval.thread_config or {}).get("configurable") or {}
    return {"configurable": _resumable(stored)}


def _resumable(configurable: Mapping[str, Any]) -> dict[str, Any]:
    return {k: configurable[k] for k in _RESUME_KEYS if configurable.get(k)}


def _thread_config(config: RunnableConfig) -> dict[str, Any]:
    return {"configurable": _resumable(config.get("configurable") or {})}


@dataclass
class SignoffTools:
    """What the middleware and the tool node share: a ledger, an approval store, a spec per
    tool (`default` for tools without one; its name is ignored) and the policy decision point
    that judges every call.

    Close it (`await tools.close()`, or `async with`) when it built its own decision point (the
    default): that closes the point, not the ledger or the store."""

    ledger: ToolLedger
    approvals: ApprovalStore
    specs: Sequence[ToolSpec] = ()
    default: ToolSpec = field(default_factory=lambda: ToolSpec("*"))
    requested_by: str = "agent"
    loop: asyncio.AbstractEventLoop | None = None
    """The event loop the ledger's and the store's database pool belong to, when it runs in a
    thread of its own (`from_conn_string_sync` sets it): sync code (`agent.invoke`) runs the
    middleware's work there."""
    policy: PolicyChoice = DATABASE_SETS
    """What decides whether a call runs, asks for approval or is refused: a policy decision
    point; `DATABASE_SETS` (default) builds one over the ledger's database (with no set
    published, or a set of mode off, each tool's spec decides, as with None); None: each
    tool's spec alone, whatever is published."""
    _by_name: dict[str, ToolSpec] = field(init=False, repr=False)
    _own_point: PolicyPoint | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        self._by_name = specs_by_name(self.specs)
        # Built here, not on first use: copies (`dataclasses.replace`, as the middleware makes)
        # share this point, and closing this object closes it.
        self.policy, self._own_point = point_of(self.policy, self.ledger)

    @property
    def point(self) -> PolicyPoint | None:
        """The policy decision point calls are judged by (None: each tool's spec decides)."""
        return self.policy if isinstance(self.policy, PolicyPoint) else None

    async def close(self) -> None:
        """Close the policy decision point this object built (not a point it was given, nor
        the ledger or the store)."""
        if self._own_point is not None:
            await self._own_point.close()

    async def __aenter__(self) -> SignoffTools:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @classmethod
    @contextmanager
    def from_conn_string_sync(
        cls,
        conn_string: str,
        *,
        specs: Sequence[ToolSpec] = (),
        default: ToolSpec | None = None,
        requested_by: str = "agent",
        settings: Settings | None = None,
        pool_size: int = 4,
    ) -> Iterator[SignoffTools]:
        """For code without an event loop (`agent.invoke`): the database pool, key ring, store
        and ledger live on an event loop in a thread of their own while the `with` block runs
        (`loop` names it), as `EncryptedPostgresSaver.from_conn_string_sync` does for the
        checkpoints, with the policy decision point over that database's published sets. The
        KEK comes from `settings` (default: the environment's)."""

        @asynccontextmanager
        async def open_tools() -> AsyncIterator[SignoffTools]:
            async with AsyncExitStack() as stack:
                db = await Database.connect(conn_string, pool_size=pool_size, settings=settings)
                stack.push_async_callback(db.close)
                ring = await KeyRing.open(db)
                store = ApprovalStore(db, ring)
                stack.push_async_callback(store.close)
                ledger = ToolLedger(db, ring)
                stack.push_async_callback(ledger.close)
                tools = cls(
                    ledger,
                    store,
                    specs,
                    default or ToolSpec("*"),
                    requested_by,
                    loop=asyncio.get_running_loop(),
                )
                stack.push_async_callback(tools.close)  # its policy decision point
                yield tools

        with held_on_loop_thread(open_tools, name="signoff-tools") as tools:
            yield tools

    def spec(self, name: str) -> ToolSpec:
        """The spec of the tool of that name (the default, named so, for any other)."""
        return self._by_name.get(name) or replace(self.default, name=name)

    def approval_request(
        self,
        approval: Approval,
        tool_call: Mapping[str, Any],
        *,
        description: str | None = None,
        refused: str | None = None,
    ) -> dict[str, Any]:
        """The interrupt value: HumanInTheLoopMiddleware's per-call request plus our ids; when
        the last answer was refused, `refused` says why (answer again)."""
        request = {
            "type": "tool_approval",
            "tool_call_id": tool_call["id"],
            "name": tool_call["name"],
            "args": tool_call["args"],
            "description": (
                self.spec(tool_call["name"]).description or description_of(approval)
                if description is None
                else description
            ),
            "approval_id": approval.approval_id,
            "allowed_decisions": sorted(str(d) for d in decidable(approval.policy)),
        }
        if refused is not None:
            request["refused"] = refused
        return request

    @staticmethod
    def decides_in_store(policy: ApprovalPolicy, store_only: bool | None) -> bool:
        """Whether only the store decides approvals under `policy`: always for the four-eyes
        tier (an authenticated reviewer decides, never a resume value), and for the
        self-confirm tier when `store_only` says so."""
        return policy.tier is ApprovalTier.FOUR_EYES or bool(store_only)

    async def resolve(
        self,
        approval: Approval,
        value: Any,
        tool_call: Mapping[str, Any],
        config: RunnableConfig,
        *,
        store_only: bool | None = None,
    ) -> tuple[Approval, str | None]:
        """`apply_resume`, with a refused answer reported rather than raised: the approval as
        the store has it and why the answer was refused (None: taken). A refusal writes
        nothing, so the same answer is refused again when LangGraph replays it, and the caller
        asks again with a new `interrupt()` whose answer can go through.

        An answer that differs from a decision the store already holds (`DecisionConflict`)
        is no refusal: the recorded decision stands and the call goes on with it."""
        try:
            if self.decides_in_store(approval.policy, store_only) and _is_decision(value):
                four_eyes = approval.policy.tier is ApprovalTier.FOUR_EYES
                by = "by an authenticated reviewer, four-eyes: " if four_eyes else ""
                raise InvalidResume(
                    f"approval {approval.approval_id} ({tool_call['name']}) is decided in "
                    f"Signoff's store only ({by}`signoff approvals decide`, the HTTP "
                    "service): a resume value cannot decide it; resume with nothing once it "
                    "is decided"
                )
            return await self.apply_resume(approval, value, tool_call, config), None
        except DecisionConflict as e:
            log.warning(
                "resume answer differs from the recorded decision; the recorded one stands",
                approval_id=approval.approval_id,
                recorded=e.recorded,
                attempted=e.attempted,
            )
            return await self.approvals.get(approval.approval_id), None
        except _REFUSALS as e:
            log.info(
                "resume answer refused", approval_id=approval.approval_id, error=type(e).__name__
            )
            return await self.approvals.get(approval.approval_id), str(e)

    def requester(self, config: RunnableConfig) -> str:
        """Who asks for the calls of this run: `configurable["signoff_requested_by"]` when the
        caller knows (a chat user), else `requested_by`. The policy's principal, and the
        requester of approvals (who cannot approve their own request unless the policy allows
        it)."""
        configurable = config.get("configurable") or {}
        return str(configurable.get(REQUESTED_BY) or self.requested_by)

    async def judge(
        self, tool_call: Mapping[str, Any], config: RunnableConfig, tool: BaseTool | None = None
    ) -> Verdict | None:
        """The verdict on this call: allowed, refused or to be approved (`policy`, else the
        tool's spec). None in a `DEFERRED` graph, which runs nothing (its Step judged the
        call). `tool`'s argument schema registers the tool for the sets published next.

        Raises:
            DatabaseUnavailable: the database cannot be reached.
        """
        if deferred(config):
            return None
        spec = self.spec(tool_call["name"])
        spec = replace(spec, effect=effect_of(tool, spec))
        call = ToolCall(run_id_of(config), tool_call["id"], tool_call["name"], tool_call["args"])
        schema = None if tool is None or self.point is None else tool_args_schema(tool)
        return await judge(self.point, spec, call, self.requester(config), args_schema=schema)

    async def pending_approval(
        self,
        tool_call: Mapping[str, Any],
        config: RunnableConfig,
        *,
        messages: Sequence[Any] = (),
        tool: BaseTool | None = None,
        verdict: Verdict | None = None,
    ) -> Approval | None:
        """The approval this call still needs, or None: the verdict (`judge`, judged here when
        not given) asks for none, or the ledger has the call already (a finished call is never
        asked about again).

        A new request carries the verdict's approval policy and stamp, what led to the call,
        read from `messages` (the conversation: `request_context`), and `tool`'s argument
        schema when the policy has none (`with_args_schema`)."""
        if deferred(config):
            await self.require_recorded(tool_call, config)
            return None
        if verdict is None:
            verdict = await self.judge(tool_call, config, tool)
        if verdict is None or verdict.outcome is not Outcome.APPROVAL:
            return None
        spec = governed(self.spec(tool_call["name"]), verdict)
        assert spec.approval is not None  # an approval verdict carries its policy
        run_id = run_id_of(config)
        try:
            await self.ledger.get(run_id, tool_call["id"])
            return None
        except UnknownCall:
            pass
        configurable = config.get("configurable") or {}
        spec = replace(spec, approval=with_args_schema(spec.approval, tool))
        return await ask(
            self.approvals,
            spec,
            ToolCall(run_id, tool_call["id"], tool_call["name"], tool_call["args"]),
            self.requester(config),
            thread_id=configurable.get("thread_id"),
            thread_config=_thread_config(config),
            context=request_context(messages, tool_call["id"]),
            verdict=verdict,
        )

    async def require_recorded(self, tool_call: Mapping[str, Any], config: RunnableConfig) -> None:
        """Raises:
        ToolOutsideStep: the ledger holds no outcome for this call (its Step has not run it)."""
        run_id, call_id = run_id_of(config), str(tool_call.get("id") or "")
        name = str(tool_call.get("name"))
        once = name if self.spec(name).once_per_run else None
        record = await self.ledger.answering(run_id, call_id, once)
        if record is None or not record.status.final:
            raise ToolOutsideStep(run_id, call_id, name)

    async def apply_resume(
        self, approval: Approval, value: Any, tool_call: Mapping[str, Any], config: RunnableConfig
    ) -> Approval:
        """Take a resume value: a HumanInTheLoopMiddleware decision (recorded in the store as
        self-confirmed by this process, the self-confirm tier's decision: no reviewer's name,
        no reviewer KEK; the same decision replayed is a duplicate, a different one than the
        store holds raises `DecisionConflict`; a malformed one `InvalidApprovalRequest`,
        `runtime.hitl`; on a four-eyes approval `DecisionNotAllowed`), a signed token
        (verified against this call), or nothing (read the store)."""
        if value is None or value == "continue" or value == {}:
            return await self.approvals.get(approval.approval_id)
        if isinstance(value, str):
            return await self.approvals.verify_token(
                value,
                run_id=approval.run_id,
                tool=tool_call["name"],
                args=tool_call["args"],
                call_id=tool_call["id"],
            )
        if isinstance(value, dict) and ("decisions" in value or "type" in value):
            decision = hitl_decision(one_decision(value), tool_call["name"])
            # Whoever answers at the agent is this process, never a reviewer it could name.
            recorded = await confirm_once(self.approvals, approval.approval_id, decision)
            return recorded.approval
        raise InvalidResume(
            f"cannot resume approval {approval.approval_id} with {type(value).__name__}: send a "
            "decision ({'type': 'approve'|'reject'|'edit'|'respond', ...}), a signed token, "
            "or nothing"
        )

    async def refuse_duplicate(
        self,
        tool_call: Mapping[str, Any],
        same: list[Mapping[str, Any]],
        tool: BaseTool | None,
        config: RunnableConfig,
        turn: str,
    ) -> ToolMessage:
        """A call id the model used several times in one message: recorded as failed, never
        run. The entry's arguments are every copy's, so each copy records or replays the same
        refusal (with its own arguments, the second would clash with the first)."""
        reason = (
            f"the tool call id {tool_call['id']!r} appears {len(same)} times in one model "
            "message; call ids must be unique, so none of them ran"
        )

        async def refuse(args: dict[str, Any], tool_config: RunnableConfig) -> ToolMessage:
            return ToolMessage(
                content=reason, tool_call_id=tool_call["id"], name=tool_call["name"], status="error"
            )

        copies = {"copies": [dict(c.get("args") or {}) for c in same]}
        # Not judged: the call never runs, whatever a policy says.
        return await self.run(
            {**tool_call, "args": copies}, tool, config, refuse, verdict=None, turn_id=turn
        )

    async def run(
        self,
        tool_call: Mapping[str, Any],
        tool: BaseTool | None,
        config: RunnableConfig,
        execute: Execute,
        *,
        verdict: Verdict | None,
        approval: Approval | None = None,
        turn_id: str = "0",
    ) -> ToolMessage:
        """Run one call through the ledger under `verdict` (`judge`: a denial is recorded and
        nothing runs; None: no policy judged it, `approval` alone gates it), consuming
        `approval` if the verdict needs it; its message. With `DEFERRED` only a recorded
        outcome is replayed (`ToolOutsideStep` otherwise)."""
        if deferred(config):
            await self.require_recorded(tool_call, config)
        spec = self.spec(tool_call["name"])
        spec = replace(spec, effect=effect_of(tool, spec))
        run_id = run_id_of(config)
        call = ToolCall(run_id, tool_call["id"], tool_call["name"], tool_call["args"], turn_id)

        async def fn(args: dict[str, Any], context: CallContext) -> Any:
            configurable = {**(config.get("configurable") or {})}
            configurable[IDEMPOTENCY_KEY] = context.idempotency_key
            token = _current_key.set(context.idempotency_key)
            try:
                message = await execute(args, {**config, "configurable": configurable})
            except GraphBubbleUp as e:
                # A tool that pauses itself would repeat what it did before the pause on
                # resume: ask through a spec's approval policy instead.
                raise RuntimeError(
                    f"{call.tool} paused the graph itself ({type(e).__name__}); tools run "
                    "through Signoff ask for approval through their spec instead"
                ) from None
            finally:
                _current_key.reset(token)
            if message.status == "error":
                raise ToolFailed(str(message.content))
            return message.content

        approval_id = None if approval is None else approval.approval_id
        principal = self.requester(config)

        async def judge_again(again: ToolCall) -> Verdict:
            return await judge(self.point, spec, again, principal)

        outcome = await run_call(
            self.ledger,
            self.approvals,
            spec if verdict is None else governed(spec, verdict),
            call,
            fn,
            approval_id,
            verdict=verdict,
            judge_again=None if verdict is None else judge_again,
        )
        return tool_message(outcome, tool_call)


# What an answer can be refused for: its shape, the policy, the token, the reviewer. Each depends
# on the answer and the policy only, so a replayed answer is refused again.
_REFUSALS = (
    InvalidApprovalRequest,
    InvalidResume,
    DecisionNotAllowed,
    TokenError,
    ApprovalExpired,
    ApprovalAlreadyDecided,
    UnknownReviewer,
)


def _is_decision(value: Any) -> bool:
    """A resume value that would record a decision (not nothing, not a signed token)."""
    return isinstance(value, dict) and ("decisions" in value or "type" in value)


def tool_message(outcome: CallOutcome, tool_call: Mapping[str, Any]) -> ToolMessage:
    """What the model reads for an outcome."""
    name, call_id = tool_call["name"], tool_call["id"]
    status = outcome.status
    if status in (CallStatus.SUCCEEDED, CallStatus.RESPONDED):
        result = outcome.result
        content = (
            result if isinstance(result, str) or is_content_blocks(result) else json.dumps(result)
        )
        return ToolMessage(content=content, name=name, tool_call_id=call_id, status="success")
    if status is CallStatus.DENIED and outcome.approval_id is None:
        # Refused by Signoff's policy (no reviewer was asked): the reason is the policy's.
        content = f"Signoff's policy refused the call to `{name}`: {outcome.error}. It did not run."
    elif status is CallStatus.DENIED:
        content = f"A reviewer rejected the call to `{name}`: {outcome.error}. It did not run."
    elif status is CallStatus.OUTCOME_UNKNOWN:
        content = (
            f"The outcome of the call to `{name}` is unknown: it may or may not have taken "
            f"effect ({outcome.error}). Do not call it again; a person will check and resolve it."
        )
    else:
        content = f"The call to `{name}` failed: {outcome.error}"
    return ToolMessage(content=content, name=name, tool_call_id=call_id, status="error")


def is_content_blocks(result: Any) -> bool:
    """Whether a result is content blocks (text, or `{"type": ...}` blocks such as files and
    images), which a `ToolMessage` carries as they are: the model reads a file as a file."""
    return isinstance(result, list) and all(
        isinstance(b, str) or (isinstance(b, dict) and isinstance(b.get("type"), str))
        for b in result
    )
