"""Welt's conversation turn: Bedrock Converse-shaped messages, into the role/content messages a
LangGraph agent takes (`{"messages": decode_messages(payload["messages"])}`).

A turn carries `text`, `image`, `document` and `video` blocks (files base64-encoded), user
messages first; Welt's own earlier replies are assistant messages of text only. A `toolUse` or
`toolResult` block is refused outright (`ForgedToolTurn`): Welt never sends one, and rebuilt into
history it would let whoever sent it put tool calls the model never made, and their "results",
into the run. Anything else outside the contract is refused too (`InvalidWeltPayload`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import ForgedToolTurn, InvalidWeltPayload

__all__ = ["FORGED_BLOCKS", "MEDIA_TYPES", "decode_messages"]

FORGED_BLOCKS = frozenset({"toolUse", "toolResult"})

# The media types LangChain's standard content blocks carry, by Converse format token.
MEDIA_TYPES: dict[str, dict[str, str]] = {
    "image": {"gif": "image/gif", "jpeg": "image/jpeg", "png": "image/png", "webp": "image/webp"},
    "document": {
        "csv": "text/csv",
        "doc": "application/msword",
        "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "html": "text/html",
        "md": "text/markdown",
        "pdf": "application/pdf",
        "txt": "text/plain",
        "xls": "application/vnd.ms-excel",
        "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    },
    "video": {
        "flv": "video/x-flv",
        "mkv": "video/x-matroska",
        "mov": "video/quicktime",
        "mp4": "video/mp4",
        "mpeg": "video/mpeg",
        "mpg": "video/mpeg",
        "three_gp": "video/3gpp",
        "webm": "video/webm",
        "wmv": "video/x-ms-wmv",
    },
}
_BLOCK_TYPE = {"image": "image", "document": "file", "video": "video"}


def decode_messages(messages: Any) -> list[dict[str, Any]]:
    """Welt's `messages` value (or the whole payload) as role/content dicts with standard
    content blocks; base64 data stays base64.

    Raises:
        ForgedToolTurn: a `toolUse` or `toolResult` block, in any message.
        InvalidWeltPayload: anything else the contract does not allow (empty, a first message
            that is not the user's, unknown roles, block kinds or formats, files in an
            assistant message, empty text or bytes).
    """
    if isinstance(messages, Mapping) and set(messages) == {"messages"}:
        messages = messages["messages"]
    if not isinstance(messages, list) or not messages:
        raise InvalidWeltPayload("messages", "must be a non-empty list")
    decoded: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, Mapping) or set(message) != {"role", "content"}:
            raise InvalidWeltPayload(where, "a message is {role, content} and no more")
        role, content = message["role"], message["content"]
        if role not in ("user", "assistant"):
            raise InvalidWeltPayload(f"{where}.role", f"is 'user' or 'assistant', not {role!r}")
        if not isinstance(content, list) or not content:
            raise InvalidWeltPayload(f"{where}.content", "must be a non-empty list of blocks")
        blocks = [_block(b, role, f"{where}.content[{i}]") for i, b in enumerate(content)]
        if index == 0 and role != "user":
            raise InvalidWeltPayload(where, "the conversation starts with a user message")
        decoded.append({"role": role, "content": blocks})
    return decoded


def _block(block: Any, role: str, where: str) -> dict[str, Any]:
    if not isinstance(block, Mapping) or len(block) != 1:
        raise InvalidWeltPayload(where, "a content block is an object with exactly one key")
    ((kind, body),) = block.items()
    if kind in FORGED_BLOCKS:
        raise ForgedToolTurn(where, kind)
    if kind == "text":
        if not isinstance(body, str) or not body:
            raise InvalidWeltPayload(f"{where}.text", "must be a non-empty string")
        return {"type": "text", "text": body}
    if kind not in MEDIA_TYPES:
        raise InvalidWeltPayload(where, f"Welt sends no {kind!r} blocks")
    if role != "user":
        raise InvalidWeltPayload(where, f"an {role} message carries text only, not {kind}")
    return _file_block(kind, body, f"{where}.{kind}")


def _file_block(kind: str, body: Any, where: str) -> dict[str, Any]:
    allowed = {"format", "source", "name"} if kind == "document" else {"format", "source"}
    if not isinstance(body, Mapping) or set(body) != allowed:
        raise InvalidWeltPayload(where, f"has exactly the keys {sorted(allowed)}")
    token = body["format"]
    mime_type = MEDIA_TYPES[kind].get(token) if isinstance(token, str) else None
    if mime_type is None:
        raise InvalidWeltPayload(f"{where}.format", f"{token!r} is no {kind} format Welt sends")
    source = body["source"]
    if not isinstance(source, Mapping) or set(source) != {"bytes"}:
        raise InvalidWeltPayload(f"{where}.source", 'is {"bytes": "<base64>"}')
    data = source["bytes"]
    if not isinstance(data, str) or not data:
        raise InvalidWeltPayload(f"{where}.source.bytes", "must be a non-empty base64 string")
    decoded: dict[str, Any] = {"type": _BLOCK_TYPE[kind], "base64": data, "mime_type": mime_type}
    if kind == "document":
        name = body["name"]
        if not isinstance(name, str) or not name.strip():
            raise InvalidWeltPayload(f"{where}.name", "must be a non-empty string")
        # `name` is the model's handle on the document (Converse's); `filename` what other
        # integrations read.
        decoded |= {"name": name, "filename": f"{name}.{token}"}
    return decoded
