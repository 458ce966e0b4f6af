"""Long waits as MCP tasks (the `io.modelcontextprotocol/tasks` extension, 2026-07-28).

When a four-eyes approval is still pending after a round's wait and the request declares the
extension, the gateway answers `resultType: "task"` instead of asking the client to come back.
The task keeps no state of its own: its id is a handle sealed under Signoff's key ring (the
approval, the run, the call, the tool, its arguments and the principal), and its status is
read from PostgreSQL each time, from the approval and the call's ledger entry. So it survives
a gateway restart, and any replica answers `tasks/get`: the one that first sees the approval
decided runs the call through the ledger, which runs it once whichever replica asks.

`tasks/cancel` is refused: a pending approval is cancelled by a reviewer (signed), not by the
agent. `tasks/update` is acknowledged and ignored: these tasks ask for no input.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.request_state import InvalidRequestState
from mcp.shared.exceptions import MCPError

from adapters.runtime import ready
from approvals import Approval, UnknownApproval
from ledger.calls.model import ToolCall
from ledger.errors import SignoffError
from ledger.log import get_logger

from .asking import approval_url
from .errors import CALL_REFUSED, refused, signoff_refusal
from .request_state import RingCodec, ready_to_seal

if TYPE_CHECKING:
    from .calls import Gateway

__all__ = ["TASKS", "TaskParams", "created", "declares_tasks", "serve_tasks"]

log = get_logger(__name__)

TASKS = "io.modelcontextprotocol/tasks"
_CONTEXT = b"signoff.mcp.task.v1"
_POLL_MS = 2000
_MAX_ARGS = 4096  # a handle travels in an HTTP header (Mcp-Name): keep it small


class TaskParams(types.RequestParams):
    """`tasks/get`, `tasks/update`, `tasks/cancel`: the task's id (updates' responses are
    ignored)."""

    task_id: str
    input_responses: dict[str, Any] | None = None


def declares_tasks(meta: types.RequestParamsMeta | dict[str, Any] | None) -> bool:
    """Whether the request's `_meta` declares the tasks extension among its capabilities."""
    capabilities = (meta or {}).get(types.CLIENT_CAPABILITIES_META_KEY)
    extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
    return isinstance(extensions, dict) and TASKS in extensions


async def created(
    gateway: Gateway, approval: Approval, call: ToolCall, principal: str
) -> dict[str, Any] | None:
    """The `CreateTaskResult` for a call waiting on `approval`; None when its arguments are
    too large to travel in a handle (the client is then asked to come back instead)."""
    args = json.dumps(call.args, sort_keys=True, separators=(",", ":"))
    if len(args) > _MAX_ARGS:
        return None
    handle = {
        "approval": approval.approval_id,
        "run": call.run_id,
        "call": call.call_id,
        "tool": call.tool,
        "args": call.args,
        "principal": principal,
    }
    await ready_to_seal(gateway.ring)
    task_id = _codec(gateway).seal(json.dumps(handle, separators=(",", ":")).encode())
    log.info("call waits as a task", run_id=call.run_id, approval_id=approval.approval_id)
    return {"resultType": "task", **_working(gateway, task_id, approval)}


def serve_tasks(gateway: Gateway, server: Any) -> None:
    """Register `tasks/get`, `tasks/update`, `tasks/cancel` on the lowlevel `server` and
    advertise the extension."""

    async def get(ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        return {"resultType": "complete", **await _status(gateway, ctx, params)}

    async def update(ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        await _opened(gateway, ctx, params)
        return {"resultType": "complete"}

    async def cancel(ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        handle = await _opened(gateway, ctx, params)
        raise refused(
            CALL_REFUSED,
            "cancel_refused",
            "a pending approval is cancelled by a reviewer, not by the agent: ask one to "
            f"cancel {handle['approval']} (signoff approvals cancel)",
        )

    server.add_request_handler("tasks/get", TaskParams, get)
    server.add_request_handler("tasks/update", TaskParams, update)
    server.add_request_handler("tasks/cancel", TaskParams, cancel)
    server.extensions[TASKS] = {}


async def _status(
    gateway: Gateway, ctx: ServerRequestContext[Any, Any], params: TaskParams
) -> dict[str, Any]:
    handle = await _opened(gateway, ctx, params)
    try:
        approval = await gateway.store.get(handle["approval"])
    except UnknownApproval:
        raise _unknown() from None
    if not ready(approval):
        return _working(gateway, params.task_id, approval)
    route = gateway.upstreams.routes.get(handle["tool"])
    task = _task(params.task_id, approval)
    if route is None:
        error = types.ErrorData(code=CALL_REFUSED, message=f"no tool {handle['tool']!r} here")
        return {**task, "status": "failed", "error": error.model_dump(exclude_none=True)}
    call = ToolCall(handle["run"], handle["call"], handle["tool"], handle["args"])
    try:
        try:
            result = await gateway.run_approved(route, call, approval, gateway.principal_of(ctx))
        except SignoffError as signoff:
            raise signoff_refusal(signoff) from None
    except MCPError as e:
        return {
            **task,
            "status": "failed",
            "statusMessage": e.message,
            "error": e.error.model_dump(mode="json", exclude_none=True),
        }
    dumped = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    return {**task, "status": "completed", "result": dumped}


async def _opened(
    gateway: Gateway, ctx: ServerRequestContext[Any, Any], params: TaskParams
) -> dict[str, Any]:
    """The handle of `params.task_id`, if this caller's; any other is unknown here."""
    if not declares_tasks(ctx.meta):
        raise MCPError(
            code=types.MISSING_REQUIRED_CLIENT_CAPABILITY,
            message="Missing required client capability",
            data={"requiredCapabilities": {"extensions": {TASKS: {}}}},
        )
    await ready_to_seal(gateway.ring, params.task_id)  # its key, if made elsewhere since
    try:
        handle = json.loads(_codec(gateway).unseal(params.task_id))
    except (InvalidRequestState, ValueError):
        raise _unknown() from None
    if not isinstance(handle, dict) or handle.get("principal") != gateway.principal_of(ctx):
        raise _unknown()
    return handle


def _working(gateway: Gateway, task_id: str, approval: Approval) -> dict[str, Any]:
    url = approval_url(gateway.config.public_url, approval.approval_id)
    return {
        **_task(task_id, approval),
        "status": "working",
        "statusMessage": f"waiting for a reviewer's decision on {approval.approval_id}: {url}",
        "pollIntervalMs": _POLL_MS,
    }


def _task(task_id: str, approval: Approval) -> dict[str, Any]:
    ttl = None
    if approval.expires_at is not None:  # decided or expired by then: a day to read it after
        ttl = int((approval.expires_at - approval.requested_at).total_seconds() * 1000) + 86_400_000
    return {
        "taskId": task_id,
        "createdAt": approval.requested_at.isoformat(),
        "lastUpdatedAt": (approval.decided_at or datetime.now(UTC)).isoformat(),
        "ttlMs": ttl,
    }


def _codec(gateway: Gateway) -> RingCodec:
    return RingCodec(gateway.ring, _CONTEXT)


def _unknown() -> MCPError:
    return refused(CALL_REFUSED, "unknown_task", "no such task for this caller")
