"""`one_use(node, signoff)`: your own node, re-run safely.

LangGraph re-runs an interrupted node from the top when it resumes (and after a crash, or
when a run is replayed from an earlier checkpoint), so whatever the node did before the
pause happens again (langgraph issue 6208). Inside a `one_use` node, do that work in steps:

```python
async def settle(state: State) -> dict[str, Any]:
    draft = await step("draft", make_draft, {"order_id": state["order_id"]})
    sent = await step("send", send_mail, {"draft": draft.result})  # spec: approval required
    if sent.status is not CallStatus.SUCCEEDED:
        return {"note": f"not sent: {sent.error}"}  # a rejection: the rest is skipped
    return {"note": "sent"}

graph.add_node("settle", one_use(settle, signoff))
```

- `step(name, fn, args)` runs `fn(args)` (or `fn()` without args) through the ledger once per
  task run and returns its `CallOutcome`; a re-run replays it. When the policy (or the spec of
  `name`) asks for approval, the step first pauses the graph (the middleware's request shape)
  until the approval is final, then consumes it as it runs: each answer is used once. A
  rejected or expired one comes back as a `denied` outcome, a reviewer's answer as
  `responded`; a step the policy refuses is `denied` at once and never runs.
- `ask(name, args)` is an approval on its own: a step whose result is the approved (maybe
  edited) arguments.
- The call id of a step is `<node>:<task id>/<name>`: the task id is LangGraph's, the same on
  every re-run of one visit of the node (and new on the next visit), so names must be unique
  within a node, not across visits. Sync nodes use `step_sync` and `ask_sync`; the graph runs
  with `ainvoke`/`astream` (the ledger is asyncio).
- Resume values are LangGraph's positional ones: the n-th `interrupt()` of a task gets the
  n-th answer. Approvals that were final before a re-run would skip their pauses and hand
  their answers to the next question, so every pause is recorded in the ledger before it is
  raised (`<call id>#pause-<n>`, tool `signoff.pause`) and replayed in the same place. Do not
  call `interrupt()` yourself in a `one_use` node.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import inspect
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphBubbleUp
from langgraph.types import interrupt

from adapters.runtime import governed, judge
from adapters.runtime import run as run_call
from approvals import Approval
from approvals.policies import Outcome, Verdict
from ledger.calls.model import CallContext, CallOutcome, Effect, ToolCall, ToolPolicy
from ledger.errors import InvalidToolCall, UnknownCall

from .errors import OutsideOneUse
from .tools import SignoffTools, run_id_of

__all__ = ["PAUSE_TOOL", "ask", "ask_sync", "one_use", "step", "step_sync"]

PAUSE_TOOL = "signoff.pause"
T = TypeVar("T")


class Node(Protocol):
    """What `one_use` returns: a node LangGraph calls with its config."""

    def __call__(self, state: Any, config: RunnableConfig) -> Awaitable[Any]: ...


@dataclass
class _TaskRun:
    """One visit of a `one_use` node, the same across its re-runs."""

    signoff: SignoffTools
    config: RunnableConfig
    task: str
    loop: asyncio.AbstractEventLoop
    store_only: bool | None = None

    async def step(
        self, name: str, fn: Callable[..., Any], args: Mapping[str, Any] | None
    ) -> CallOutcome:
        _check_name(name)
        spec = self.signoff.spec(name)
        # The step's call id (not who consumes its approval: the runtime builds that).
        call_id = "/".join((self.task, name))
        call: dict[str, Any] = {"id": call_id, "name": name, "args": dict(args or {})}
        # Judged on every re-run of the node: a set published since the pause decides.
        verdict = await self.signoff.judge(call, self.config)
        asks = verdict is not None and verdict.outcome is Outcome.APPROVAL
        approval = await self._decided(call, verdict) if asks else None
        run_id = run_id_of(self.config)
        tool_call = ToolCall(run_id, call["id"], name, call["args"])
        with_args = args is not None
        principal = self.signoff.requester(self.config)

        async def execute(given: dict[str, Any], context: CallContext) -> Any:
            try:
                if inspect.iscoroutinefunction(fn):
                    result = await (fn(given) if with_args else fn())
                else:
                    result = (
                        await asyncio.to_thread(fn, given)
                        if with_args
                        else await asyncio.to_thread(fn)
                    )
                    if inspect.isawaitable(result):
                        result = await result
            except GraphBubbleUp as e:
                raise RuntimeError(
                    f"step {name!r} paused the graph itself ({type(e).__name__}); ask through "
                    "a spec's approval policy instead"
                ) from None
            return result

        async def judge_again(again: ToolCall) -> Verdict:
            return await judge(self.signoff.point, spec, again, principal)

        approval_id = None if approval is None else approval.approval_id
        return await run_call(
            self.signoff.ledger,
            self.signoff.approvals,
            spec if verdict is None else governed(spec, verdict),
            tool_call,
            execute,
            approval_id,
            verdict=verdict,
            judge_again=None if verdict is None else judge_again,
        )

    async def _decided(self, call: dict[str, Any], verdict: Verdict | None) -> Approval | None:
        """The call's approval once final (None: the ledger has the call already), after
        replaying every pause recorded for it, each in its place."""
        approval = await self.signoff.pending_approval(call, self.config, verdict=verdict)
        placeholder = {"type": "tool_approval", "tool_call_id": call["id"], "name": call["name"]}
        pause = 0
        refused: str | None = None
        while True:
            marker = f"{call['id']}#pause-{pause}"
            if not await self._recorded(marker):
                if approval is None or approval.status.final:
                    return approval
                await self._record(marker, approval)
            request = (
                placeholder
                if approval is None
                else self.signoff.approval_request(approval, call, refused=refused)
            )
            value = interrupt(request)
            if approval is not None and not approval.status.final:
                # A refused answer records nothing: the next pause asks again.
                approval, refused = await self.signoff.resolve(
                    approval, value, call, self.config, store_only=self.store_only
                )
            pause += 1  # an answer given to this approval before: its place is taken

    async def _recorded(self, marker: str) -> bool:
        try:
            await self.signoff.ledger.get(run_id_of(self.config), marker)
        except UnknownCall:
            return False
        return True

    async def _record(self, marker: str, approval: Approval) -> None:
        call = ToolCall(
            run_id_of(self.config), marker, PAUSE_TOOL, {"approval_id": approval.approval_id}
        )

        async def nothing(args: dict[str, Any], context: CallContext) -> None:
            return None

        await self.signoff.ledger.execute(call, nothing, ToolPolicy(Effect.READ))

    def blocking(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run a coroutine of this task run on its event loop from a sync node's thread, in
        that thread's context (LangGraph's config, for `interrupt()`)."""
        if _on_loop(self.loop):
            raise OutsideOneUse("step_sync and ask_sync are for sync nodes: await step / ask")
        context = contextvars.copy_context()
        done: concurrent.futures.Future[T] = concurrent.futures.Future()

        def settle(task: asyncio.Task[T]) -> None:
            if task.cancelled():
                done.cancel()
            elif (error := task.exception()) is not None:
                done.set_exception(error)
            else:
                done.set_result(task.result())

        def start() -> None:
            self.loop.create_task(make(), context=context).add_done_callback(settle)

        self.loop.call_soon_threadsafe(start)
        return done.result()


_current: contextvars.ContextVar[_TaskRun | None] = contextvars.ContextVar(
    "signoff_one_use", default=None
)


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def _task_run(what: str) -> _TaskRun:
    run = _current.get()
    if run is None:
        raise OutsideOneUse(
            f"{what} outside a one_use node: LangGraph would run it again when it re-runs the "
            "node; wrap the node with one_use(node, signoff)"
        )
    return run


def _task_of(config: RunnableConfig) -> str:
    """`<node>:<task id>`: the innermost part of the task's checkpoint namespace."""
    namespace = str((config.get("configurable") or {}).get("checkpoint_ns") or "")
    task = namespace.split("|")[-1]
    if ":" not in task:
        raise OutsideOneUse("a one_use node runs inside a graph compiled with a checkpointer")
    return task


def _approved_args(args: dict[str, Any]) -> dict[str, Any]:
    return args


def _check_name(name: str) -> None:
    """A step's name is part of its call id; `#` is kept for the pause records beside it
    (`<call id>#pause-<n>`), which a step named like one would otherwise replay."""
    if not isinstance(name, str) or not name or "#" in name:
        raise InvalidToolCall(f"a step's name is text without '#': {name!r}")


async def step(
    name: str, fn: Callable[..., Any], args: Mapping[str, Any] | None = None
) -> CallOutcome:
    """Run `fn(args)` (`fn()` when `args` is None) once in this task run; its outcome, replayed
    on a re-run. Asks for approval first when the spec of `name` says so.

    Raises:
        OutsideOneUse: not inside a `one_use` node.
        InvalidToolCall: a name with `#`, or used before in this node visit with other
            arguments.
    """
    _check_name(name)
    return await _task_run("step()").step(name, fn, args)


async def ask(name: str, args: Mapping[str, Any]) -> CallOutcome:
    """An approval under the spec of `name`, used once: `succeeded` with the approved (maybe
    edited) arguments as its result, `denied`, or `responded` with a reviewer's answer.

    Raises:
        OutsideOneUse: not inside a `one_use` node.
        ValueError: the spec of `name` asks for no approval.
    """
    run = _task_run("ask()")
    if run.signoff.spec(name).approval is None:
        raise ValueError(f"the spec of {name!r} asks for no approval")
    return await run.step(name, _approved_args, args)


def step_sync(
    name: str, fn: Callable[..., Any], args: Mapping[str, Any] | None = None
) -> CallOutcome:
    """`step` for a sync node."""
    run = _task_run("step_sync()")
    return run.blocking(lambda: run.step(name, fn, args))


def ask_sync(name: str, args: Mapping[str, Any]) -> CallOutcome:
    """`ask` for a sync node."""
    run = _task_run("ask_sync()")
    return run.blocking(lambda: ask(name, args))


def one_use(
    node: Callable[..., Any], signoff: SignoffTools, *, store_only: bool | None = None
) -> Node:
    """Wrap your node (sync or async, with or without a `config` parameter) so its `step`s and
    `ask`s run once per visit, whatever LangGraph re-runs. `store_only`: whether only the store
    decides its self-confirm approvals too (a decision in a resume value is refused and asked
    again); a four-eyes approval is decided in the store only whatever it says, as for
    `SignoffMiddleware`."""
    takes_config = "config" in inspect.signature(node).parameters
    is_async = inspect.iscoroutinefunction(node)

    async def wrapped(state: Any, config: RunnableConfig) -> Any:
        run = _TaskRun(signoff, config, _task_of(config), asyncio.get_running_loop(), store_only)
        token = _current.set(run)
        try:
            call = (
                functools.partial(node, state, config=config)
                if takes_config
                else functools.partial(node, state)
            )
            if is_async:
                return await call()
            return await asyncio.to_thread(call)
        finally:
            _current.reset(token)

    # Not functools.wraps: LangGraph reads the signature to pass `config`, which this takes.
    wrapped.__name__ = wrapped.__qualname__ = getattr(node, "__name__", "one_use")
    return wrapped
