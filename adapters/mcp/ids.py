"""Which run and which call a `tools/call` is (see `calls`): the client's `_meta`, else the
transport's session, else what the gateway derives."""

from __future__ import annotations

import hashlib
import re
import uuid
from typing import Any

from mcp.server.context import ServerRequestContext

from adapters.runtime import ToolSpec
from adapters.runtime.ids import derived_call_id
from approvals import ApprovalStore
from ledger.calls.model import Effect
from ledger.calls.service import ToolLedger

from .errors import CALL_REFUSED, refused

__all__ = ["CALL_META", "IDEMPOTENCY_META", "RUN_META", "call_id_of", "run_id_of"]

RUN_META = "io.signoff/run"
CALL_META = "io.signoff/call"
IDEMPOTENCY_META = "io.signoff/idempotencyKey"
"""Told to the upstream with every call: the same on every attempt of one call."""
# No ':' in a client's ids: `mcp:<principal>:<conversation>` then parses one way only, so no
# principal's run can be named by another (a principal "a" with run "b:c" is not "a:b" with "c").
_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def run_id_of(
    ctx: ServerRequestContext[Any, Any], principal: str, meta: dict[str, Any], default: str
) -> str:
    """`mcp:<principal>:<conversation>`: the client's `_meta` run, else the HTTP session (by
    digest: any session id, however long, is its own), else `default`.

    Raises:
        MCPError: the client's run id is malformed (`invalid_meta`).
    """
    conversation = meta.get(RUN_META)
    if conversation is not None:
        return f"mcp:{principal}:{_checked(conversation, RUN_META)}"
    headers = getattr(ctx.request, "headers", None)
    session = headers.get("mcp-session-id") if headers is not None else None
    if session:
        conversation = "s-" + hashlib.sha256(session.encode()).hexdigest()[:40]
    return f"mcp:{principal}:{conversation or default}"


async def call_id_of(
    ledger: ToolLedger, store: ApprovalStore, spec: ToolSpec, run_id: str, args: dict[str, Any],
    meta: dict[str, Any],
) -> str:  # fmt: skip
    """The client's `_meta` call, else a new id for a read that asks nobody (it runs every
    time), else a keyed digest of the tool and its arguments: the same write (or read that needs
    approval) in one run is one call, and its run and arguments find its approval again.

    Raises:
        MCPError: the client's call id is malformed (`invalid_meta`).
    """
    given = meta.get(CALL_META)
    if given is not None:
        return _checked(given, CALL_META)
    if spec.effect is Effect.READ and spec.approval is None:
        return f"r-{uuid.uuid4().hex}"
    return await derived_call_id(
        ledger,
        store,
        run_id=run_id,
        tool=spec.name,
        args=args,
        tag=b"signoff.mcp.call.v1|" + spec.name.encode() + b"|",
        prefix="w-",
        asks=spec.approval is not None,
    )


def _checked(value: Any, key: str) -> str:
    if not isinstance(value, str) or not _ID.match(value):
        raise refused(
            CALL_REFUSED, "invalid_meta", f"_meta[{key!r}] must be 1 to 64 of A-Z a-z 0-9 _ . -"
        )
    return value
