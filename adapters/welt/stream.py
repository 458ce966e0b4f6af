"""Outbound: a LangGraph run's stream as the events Welt renders.

`renderable_events` reads the `(mode, chunk)` items of `astream(..., stream_mode=["messages",
"updates"])` and yields, in stream order:

- `data`: the model's text (an empty chunk is not sent);
- `current_tool_use`: for each tool call the model makes (`name`, `toolUseId`: the call id),
  from a whole message's calls or a streamed call's first chunk;
- `tool_result`: for each tool message (`toolUseId`, `status`), never its output;
- `file`: each file block (image, file, video, audio with base64 data) the model returns, and
  the ones a tool named in `files_from` returns; a file with no bytes is not sent;

then one `interrupt` event per approval the run paused for. Model calls LangChain middleware
makes for itself (marked `lc_internal_call`) render nothing.

Which tools' files go to the thread is the agent's choice: a tool that hands the model a file
to read keeps it to the model unless it is named. A named tool returns its file as a content
block, `{"type": "file", "name": ..., "mime_type": ..., "base64": ...}`; the upload is named
after the block's `name` (else its kind) plus the extension of its media type: `report-1a2b.csv`,
`image.png`. A named tool's message whose text is the JSON of a list of content blocks (a tool
that returns its blocks serialized) is read as those blocks.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Collection, Iterator, Mapping
from typing import Any

from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ToolMessage

from approvals import ApprovalStore
from ledger.log import get_logger

from .messages import MEDIA_TYPES
from .render import interrupt_events
from .wire import FileEvent, ToolResultEvent, ToolUseEvent, WeltEvent

__all__ = ["FILE_BLOCKS", "file_name", "renderable_events", "tool_names"]

log = get_logger(__name__)

FILE_BLOCKS = frozenset({"image", "file", "video", "audio"})
"""The content block kinds that carry a file."""

# The extension for each media type Welt's formats map to (a format token is one, but three_gp).
_EXTENSIONS = {
    mime_type: "3gp" if token == "three_gp" else token
    for formats in MEDIA_TYPES.values()
    for token, mime_type in formats.items()
}


async def renderable_events(
    stream: AsyncIterator[Any],
    store: ApprovalStore,
    *,
    files_from: Collection[str] | None = None,
) -> AsyncIterator[WeltEvent]:
    """The events Welt renders for one run's stream.

    Args:
        stream: `graph.astream(..., stream_mode=["messages", "updates"])`.
        store: where the approvals the run paused for are read.
        files_from: the tools whose files are uploaded to the thread (default: none).

    Raises:
        UnsupportedInterrupt: the run paused on something that is no Signoff approval.
    """
    named = tool_names(files_from)
    paused: list[Any] = []
    async for item in stream:
        if not (isinstance(item, tuple) and len(item) == 2):
            continue
        mode, chunk = item
        if mode == "messages" and isinstance(chunk, tuple) and len(chunk) == 2:
            message, metadata = chunk
            if isinstance(metadata, Mapping) and metadata.get("lc_internal_call"):
                continue
            for event in _message_events(message, named):
                yield event
        elif mode == "updates" and isinstance(chunk, Mapping):
            paused.extend(chunk.get("__interrupt__") or ())
    for question in await interrupt_events(store, paused):
        yield question


def tool_names(files_from: Collection[str] | None) -> frozenset[str]:
    """`files_from` as a set of tool names; one name given as a string is refused (it would
    be read as its letters)."""
    if isinstance(files_from, str):
        raise TypeError(f"files_from takes tool names, e.g. {{{files_from!r}}}, not one string")
    return frozenset(files_from or ())


def _message_events(message: Any, files_from: frozenset[str]) -> Iterator[WeltEvent]:
    if isinstance(message, AIMessage):  # a streamed chunk too
        if message.text:
            yield {"data": message.text}
        if isinstance(message, AIMessageChunk):
            calls = [(c.get("name"), c.get("id")) for c in message.tool_call_chunks]
        else:
            calls = [(c.get("name"), c.get("id")) for c in message.tool_calls]
        for name, call_id in calls:
            if name and call_id:  # a streamed call's later chunks carry only arguments
                yield _tool_use(name, call_id)
        yield from _files(message, "the model")
    elif isinstance(message, ToolMessage):
        yield _tool_result(message)
        if message.name is not None and message.name in files_from:
            yield from _files(_as_blocks(message), message.name)


def _tool_use(name: str, call_id: str) -> ToolUseEvent:
    return {"current_tool_use": {"name": name, "toolUseId": call_id}}


def _tool_result(message: ToolMessage) -> ToolResultEvent:
    return {"tool_result": {"toolUseId": message.tool_call_id, "status": message.status}}


def _files(message: BaseMessage, origin: str) -> Iterator[FileEvent]:
    for block in message.content_blocks:
        kind = block.get("type")
        if kind not in FILE_BLOCKS:
            continue
        data = block.get("base64")
        if not isinstance(data, str):
            continue  # a url or a provider's file id: nothing to upload
        if not data:
            # Slack refuses an empty upload, and the whole reply would fail with it.
            log.warning("welt file skipped: no bytes", origin=origin, kind=kind)
            continue
        yield {"file": {"name": file_name(str(kind), block), "bytes": data}}


def _as_blocks(message: ToolMessage) -> ToolMessage:
    """The message with its content as blocks, when its text is the JSON of a list of content
    blocks (how a list result comes back through the ledger)."""
    if not isinstance(message.content, str) or not message.content.startswith("["):
        return message
    try:
        parsed = json.loads(message.content)
    except ValueError:
        return message
    if not (
        isinstance(parsed, list)
        and parsed
        and all(isinstance(b, dict) and isinstance(b.get("type"), str) for b in parsed)
    ):
        return message
    return message.model_copy(update={"content": parsed})


def file_name(kind: str, block: Mapping[str, Any]) -> str:
    """The upload name of a file block: its `name` (else its kind) and the extension of its
    media type (the subtype for a type Welt's formats lack, `bin` if that is no extension)."""
    name = block.get("name")
    base = name if isinstance(name, str) and name else kind
    mime_type = block.get("mime_type")
    mime_type = mime_type if isinstance(mime_type, str) else ""
    extension = _EXTENSIONS.get(mime_type)
    if extension is None:
        subtype = mime_type.partition("/")[2]
        usable = subtype.isascii() and subtype.isalnum() and subtype.islower()
        extension = subtype if usable else "bin"
    return f"{base}.{extension}"
