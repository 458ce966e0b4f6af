"""The session client: start a session, send the next message, read its events, resolve an
interrupt through Signoff's store, and read the conversation from the encrypted checkpoint.

Reading events and starting sessions need a Dex server; resolving records the decision in
the store first (so it holds even when Dex is unreachable) and then wakes the session with
the decide RPC; the snapshot reads only Signoff's database.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, cast

from dex import AsyncClient, StreamMessage
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from adapters.langgraph import EncryptedPostgresSaver
from approvals import ApprovalStatus, ApprovalStore, Decision, Reviewer

from ..client import decide_approval
from ..values import DecideResult
from .flow import EVENTS, AgentSessionFlow
from .values import SessionEvent, SessionStart, UserMessage

__all__ = ["SessionClient", "SessionSnapshot", "SnapshotMessage"]


@dataclass(frozen=True)
class SnapshotMessage:
    """One message of the conversation, for display.

    Attributes:
        sequence: its place in the conversation, from 0.
        role: user, assistant, tool or system.
        text: its text (a tool's result for a tool message).
        tool_calls: an assistant message's calls, `{"id", "name", "args"}` each.
        tool_call_id: a tool message's call.
        error: a tool message that reports a failure, a denial or an unknown outcome.
    """

    sequence: int
    role: str
    text: str
    tool_calls: list[dict[str, Any]]
    tool_call_id: str | None
    error: bool


@dataclass(frozen=True)
class SessionSnapshot:
    """The conversation as the session's last checkpoint holds it, and the approvals it
    waits for."""

    session_id: str
    messages: list[SnapshotMessage]
    pending_approvals: list[str]


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = [b if isinstance(b, str) else str(b.get("text", "")) for b in content]
    return "".join(parts)


def _shown(sequence: int, message: BaseMessage) -> SnapshotMessage:
    role = {
        HumanMessage: "user",
        AIMessage: "assistant",
        ToolMessage: "tool",
        SystemMessage: "system",
    }.get(type(message), message.type)
    calls = message.tool_calls if isinstance(message, AIMessage) else []
    return SnapshotMessage(
        sequence=sequence,
        role=role,
        text=_text(message.content),
        tool_calls=[{"id": c["id"], "name": c["name"], "args": c["args"]} for c in calls],
        tool_call_id=message.tool_call_id if isinstance(message, ToolMessage) else None,
        error=isinstance(message, ToolMessage) and message.status == "error",
    )


class SessionClient:
    """A client of `AgentSessionFlow` sessions.

    Args:
        client: a Dex client whose Registry holds `flow` (the same instance).
        flow: the session Flow (a Client-only one: no `AgentSession` needed).
        store: Signoff's approval store (a reviewer-side login to decide).
        saver: Signoff's encrypted checkpointer, for `snapshot`.
        messages_key: the state key of the conversation.
    """

    def __init__(
        self,
        client: AsyncClient,
        flow: AgentSessionFlow,
        store: ApprovalStore,
        saver: EncryptedPostgresSaver | None = None,
        *,
        messages_key: str = "messages",
    ) -> None:
        self.client = client
        self.flow = flow
        self.store = store
        self.saver = saver
        self.messages_key = messages_key

    async def start_session(
        self, session_id: str, text: str, *, requested_by: str = "agent"
    ) -> None:
        """Start the session with the user's first message."""
        await self.client.start_flow(self.flow, session_id, SessionStart(text, requested_by))

    async def send_message(
        self, session_id: str, text: str, *, message_id: str | None = None
    ) -> bool:
        """The user's next message; the session takes it once its current turn is done. Send
        again with the same `message_id` after a failure: a copy that still waits is not
        queued twice (False)."""
        message = UserMessage(message_id or uuid.uuid4().hex, text)
        return await self._send(session_id, message)

    async def close_session(self, session_id: str) -> None:
        """End the session after its current turn (the Flow completes)."""
        await self._send(session_id, UserMessage(uuid.uuid4().hex, close=True))

    async def _send(self, session_id: str, message: UserMessage) -> bool:
        # The SDK's invoke_rpc overloads describe synchronous handlers; ours is async.
        send = cast(Any, self.flow.send_message)
        sent: bool = await self.client.invoke_rpc(send, session_id, message)
        return sent

    async def read_event(
        self, session_id: str, resume_token: str = "", wait: timedelta | None = None
    ) -> StreamMessage[SessionEvent]:
        """The next event after `resume_token` ("" for the first one kept); `wait` is the
        server's long-poll time.

        Raises:
            LongPollTimeoutError: nothing arrived within the server's wait.
        """
        return await self.client.read_stream(session_id, EVENTS, resume_token, wait)

    async def resolve_interrupt(
        self,
        approval_id: str,
        decision: Decision,
        reviewer: Reviewer | str,
        *,
        attempts: int = 3,
        backoff_seconds: float = 0.5,
    ) -> DecideResult:
        """Decide an interrupt (an approval) in the store, then wake the session with the
        decide RPC: as `decide_approval`, whose errors it raises. When Dex is unreachable the
        decision stays recorded and the session sees it at its next re-check."""
        return await decide_approval(
            self.client,
            self.flow,
            self.store,
            approval_id,
            decision,
            reviewer,
            attempts=attempts,
            backoff_seconds=backoff_seconds,
        )

    async def snapshot(self, session_id: str, checkpoint_id: str | None = None) -> SessionSnapshot:
        """The conversation (decrypted here; nothing of it comes from Dex) and the approvals
        the session waits for. `checkpoint_id`: the one a `turn_completed` event or the
        `SessionResult` names; None: the thread's latest checkpoint.

        Raises:
            ValueError: the client has no checkpointer.
        """
        if self.saver is None:
            raise ValueError("snapshot needs the encrypted checkpointer: SessionClient(saver=...)")
        configurable = {"thread_id": session_id, "checkpoint_ns": ""}
        if checkpoint_id is not None:
            configurable["checkpoint_id"] = checkpoint_id
        found = await self.saver.aget_tuple({"configurable": configurable})
        values = found.checkpoint["channel_values"] if found is not None else {}
        messages = list(values.get(self.messages_key) or [])
        pending = await self.store.find(run_id=session_id, status=ApprovalStatus.PENDING)
        return SessionSnapshot(
            session_id,
            [_shown(i, m) for i, m in enumerate(messages)],
            [a.approval_id for a in pending],
        )
