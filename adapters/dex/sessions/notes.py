"""A failed turn's note: a user message that lists each tool call the turn already finished
and what it came to, so the model of the next turn does not repeat a write that ran."""

from __future__ import annotations

from langchain_core.messages import AIMessage

from adapters.langgraph.tools import tool_message
from ledger.errors import UnknownCall

from .agent import AgentSession, user_message_id

__all__ = ["failed_turn_note"]


async def failed_turn_note(
    session: AgentSession, session_id: str, turn: int, error: str, checkpoint_id: str | None
) -> str | None:
    """The note for `turn`, from the conversation at `checkpoint_id` (where its failed model
    call started), or None when none of its calls has an outcome in the ledger."""
    messages = await session.conversation(session_id, checkpoint_id)
    start = next(
        (i for i, m in enumerate(messages) if m.id == user_message_id(session_id, turn)), None
    )
    if start is None:
        return None
    lines: list[str] = []
    for message in messages[start:]:
        if not isinstance(message, AIMessage):
            continue
        for call in message.tool_calls:
            call_id = str(call.get("id") or "")
            try:
                outcome = await session.signoff.ledger.outcome(session_id, call_id)
            except UnknownCall:
                continue
            if not outcome.status.final:
                continue
            shown = tool_message(outcome, call).content
            lines.append(f"- {call['name']} (call {call_id}): {outcome.status}: {shown}")
    if not lines:
        return None
    return (
        f"The previous turn failed before it finished ({error}). These tool calls of that turn "
        "had already finished; do not make them again:\n" + "\n".join(lines)
    )
