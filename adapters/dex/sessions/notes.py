"""What a failed turn leaves in the conversation: an answer to each tool call the model asked
for and nothing answered (model providers refuse a conversation with unanswered calls, so
without them every later turn would fail too), and a user message that lists each call the
turn already finished and what it came to, so the model of the next turn does not repeat a
write that ran."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from adapters.langgraph.tools import tool_message
from ledger.calls.model import CallOutcome
from ledger.errors import InvalidToolCall, UnknownCall

from .agent import AgentSession, user_message_id

__all__ = ["NOT_RUN", "failed_turn_messages"]

NOT_RUN = "The call to `{name}` did not run: the turn failed first."


async def _finished(
    session: AgentSession, session_id: str, call: Mapping[str, Any]
) -> CallOutcome | None:
    """The recorded outcome of a call, when it finished (a once-per-run tool's call: the
    run's call of that tool)."""
    call_id, name = str(call.get("id") or ""), str(call["name"])
    once = name if session.signoff.spec(name).once_per_run else None
    try:
        record = await session.signoff.ledger.answering(session_id, call_id, once)
        if record is None or not record.status.final:
            return None
        outcome = await session.signoff.ledger.outcome(session_id, record.call_id)
    except (UnknownCall, InvalidToolCall):  # an id the ledger refuses cannot have run
        return None
    return outcome if outcome.status.final else None


async def failed_turn_messages(
    session: AgentSession,
    session_id: str,
    turn: int,
    error: str,
    checkpoint_id: str | None,
    text: str | None = None,
) -> list[BaseMessage]:
    """The messages to add for `turn` to the conversation at `checkpoint_id` (where its
    failed model call started): a `ToolMessage` for each call nothing answered there (its
    recorded outcome, else that it did not run), then the note, when any call finished. When
    the turn's first model call failed, the conversation there lacks the turn's user message
    `text`: it is added, so the next turn's model knows what was asked."""
    message_id = user_message_id(session_id, turn)
    messages = await session.conversation(session_id, checkpoint_id)
    start = next((i for i, m in enumerate(messages) if m.id == message_id), None)
    if start is None:
        return [] if text is None else [HumanMessage(content=text, id=message_id)]
    answered = {m.tool_call_id for m in messages[start:] if isinstance(m, ToolMessage)}
    answers: list[BaseMessage] = []
    lines: list[str] = []
    for message in messages[start:]:
        if not isinstance(message, AIMessage):
            continue
        for call in message.tool_calls:
            call_id = str(call.get("id") or "")
            outcome = await _finished(session, session_id, call)
            if outcome is not None:
                shown = tool_message(outcome, call).content
                lines.append(f"- {call['name']} (call {call_id}): {outcome.status}: {shown}")
            if call_id in answered:
                continue
            answered.add(call_id)
            if outcome is not None:
                answers.append(tool_message(outcome, call))
            else:
                text = NOT_RUN.format(name=call["name"])
                answers.append(
                    ToolMessage(
                        content=text, name=call["name"], tool_call_id=call_id, status="error"
                    )
                )
    if not lines:
        return answers
    note = (
        f"The previous turn failed before it finished ({error}). These tool calls of that turn "
        "had already finished; do not make them again:\n" + "\n".join(lines)
    )
    return [*answers, HumanMessage(content=note)]
