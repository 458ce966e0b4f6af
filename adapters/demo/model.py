"""A scripted chat model: LangChain's fake chat model that answers by turn, no API key.

With n AI messages in the conversation it answers `script[n]` (then "Done."), so every process
that continues a thread gets the same answer; `seen` keeps each conversation it was shown.
The demo, the tests and the examples all use it; subclasses may answer from the conversation
itself (`reply`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

__all__ = ["ScriptedChatModel"]


class ScriptedChatModel(GenericFakeChatModel):
    messages: Iterator[AIMessage | str] = Field(default_factory=lambda: iter(()))
    script: list[AIMessage] = Field(default_factory=list)
    seen: list[list[BaseMessage]] = Field(default_factory=list)
    disable_streaming: Any = True  # one message per call: tool calls stay whole

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
        return self  # the script already knows which tools it calls

    def reply(self, messages: list[BaseMessage]) -> AIMessage:
        turn = sum(isinstance(m, AIMessage) for m in messages)
        return self.script[turn] if turn < len(self.script) else AIMessage(content="Done.")

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.seen.append(list(messages))
        message = self.reply(messages).model_copy(deep=True)
        return ChatResult(generations=[ChatGeneration(message=message)])
