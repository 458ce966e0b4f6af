"""Welt's wire shapes, spoken directly (welt-io-langgraph needs Python 3.12): the reply events
the agent streams (text, tool-use indicators, files, questions), the structured interrupt
reason, and the resume payload. Pure values and
checks, no I/O.

Welt renders an `interrupt` event's `reason` from its shape alone, all or nothing: a reason with
one unknown key or malformed field falls back to Welt's default buttons, without an error. So the
reasons Signoff builds are checked here against the contract before they leave (`check_reason`).

Inbound, Welt checks its own payloads against the contract; a payload that still breaks it did
not come from Welt as documented, so it is refused whole (`InvalidWeltPayload`) rather than
partly used: an answer is a decision about a tool call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, TypedDict

from ledger.limits import name_problem, text_problem

from .errors import InvalidWeltPayload

__all__ = [
    "MESSAGE_LIMIT",
    "DataEvent",
    "FileEvent",
    "InputSpec",
    "InterruptBody",
    "InterruptEvent",
    "OptionSpec",
    "Reason",
    "ToolResultEvent",
    "ToolUseEvent",
    "WeltAnswer",
    "WeltEvent",
    "check_reason",
    "envelope_of",
    "interrupt_event",
    "parse_interrupt_responses",
]

MESSAGE_LIMIT = 3000
"""Slack's section limit: Welt clips a longer question body with an ellipsis."""

MAX_OPTIONS = 25  # one Slack actions block
Source = Literal["option", "input"]
Envelope = Literal["messages", "interrupt_responses"]


class OptionSpec(TypedDict):
    """A button: pressing it answers with `value` (any JSON value) as declared."""

    value: Any
    label: NotRequired[str]
    style: NotRequired[Literal["primary", "danger"]]


class InputSpec(TypedDict, total=False):
    """A free-text field: the submitted text is the answer."""

    label: str
    multiline: bool


class Reason(TypedDict):
    """The structured reason: `message` plus `options`, `input`, or both."""

    message: str
    options: NotRequired[list[OptionSpec]]
    input: NotRequired[InputSpec]


class InterruptBody(TypedDict):
    id: str
    name: str
    reason: Reason


class InterruptEvent(TypedDict):
    """`{"interrupt": {"id", "name", "reason"}}`: one question; a stream that stops for
    answers ends with one per pending question."""

    interrupt: InterruptBody


class DataEvent(TypedDict):
    """`{"data": "<text>"}`: a chunk of the streamed reply (standard Markdown)."""

    data: str


class ToolUseBody(TypedDict):
    name: str
    toolUseId: str


class ToolUseEvent(TypedDict):
    """`{"current_tool_use": {"name", "toolUseId"}}`: opens a "using tool" indicator."""

    current_tool_use: ToolUseBody


class ToolResultBody(TypedDict):
    toolUseId: str
    status: Literal["success", "error"]


class ToolResultEvent(TypedDict):
    """`{"tool_result": {"toolUseId", "status"}}`: closes that tool's indicator, complete or
    failed. The tool's output is not on the wire."""

    tool_result: ToolResultBody


class FileBody(TypedDict):
    name: str
    bytes: str


class FileEvent(TypedDict):
    """`{"file": {"name", "bytes"}}`: a file Welt uploads into the thread (`name` with its
    extension, `bytes` base64)."""

    file: FileBody


WeltEvent = InterruptEvent | DataEvent | ToolUseEvent | ToolResultEvent | FileEvent

_OPTION_KEYS = frozenset({"value", "label", "style"})
_INPUT_KEYS = frozenset({"label", "multiline"})
_REASON_KEYS = frozenset({"message", "options", "input"})


def check_reason(reason: Mapping[str, Any]) -> None:
    """Raise ValueError unless `reason` is a structured reason Welt renders as specified (the
    shape, not Slack's sizes, except the body length Welt would clip)."""
    unknown = set(reason) - _REASON_KEYS
    if unknown:
        raise ValueError(f"reason keys Welt does not know: {sorted(unknown, key=repr)}")
    message = reason.get("message")
    if not isinstance(message, str) or not message.strip():
        raise ValueError("a reason needs a non-empty message")
    if len(message) > MESSAGE_LIMIT:
        raise ValueError(f"the message has {len(message)} characters; Welt clips {MESSAGE_LIMIT}")
    if "options" not in reason and "input" not in reason:
        raise ValueError("a reason needs options, input, or both")
    if "options" in reason:
        options = reason["options"]
        if not isinstance(options, list) or not 1 <= len(options) <= MAX_OPTIONS:
            raise ValueError(f"options must be a list of 1 to {MAX_OPTIONS} buttons")
        for option in options:
            _check_option(option)
    if "input" in reason:
        _check_input(reason["input"])


def _check_option(option: Any) -> None:
    if not isinstance(option, Mapping) or "value" not in option:
        raise ValueError(f"an option must be an object with a value: {option!r}")
    if set(option) - _OPTION_KEYS:
        unknown = sorted(set(option) - _OPTION_KEYS, key=repr)
        raise ValueError(f"option keys Welt does not know: {unknown}")
    if "label" in option and (not isinstance(option["label"], str) or not option["label"]):
        raise ValueError("an option label must be a non-empty string")
    if "style" in option and option["style"] not in ("primary", "danger"):
        raise ValueError(f"an option style is 'primary' or 'danger', not {option['style']!r}")


def _check_input(spec: Any) -> None:
    if not isinstance(spec, Mapping) or set(spec) - _INPUT_KEYS:
        raise ValueError(f"input must be an object with label and/or multiline: {spec!r}")
    if "label" in spec and (not isinstance(spec["label"], str) or not spec["label"]):
        raise ValueError("an input label must be a non-empty string")
    if "multiline" in spec and not isinstance(spec["multiline"], bool):
        raise ValueError("input multiline must be true or false")


def interrupt_event(interrupt_id: str, name: str, reason: Reason) -> InterruptEvent:
    """An `interrupt` event, its reason checked against the contract."""
    if not interrupt_id:
        raise ValueError("an interrupt event needs an id")
    check_reason(reason)
    return {"interrupt": {"id": interrupt_id, "name": name, "reason": reason}}


# -- inbound ---------------------------------------------------------------------------------


def string_keys(mapping: Mapping[Any, Any], where: str) -> set[str]:
    """The keys of a JSON object, which are strings: a mapping with any other key (possible
    only from a caller in Python) is refused by name rather than failing later on a sort.

    Raises:
        InvalidWeltPayload: a key that is not a string.
    """
    for key in mapping:
        if not isinstance(key, str):
            raise InvalidWeltPayload(where, f"has a key {key!r} of type {type(key).__name__}")
    return set(mapping)


def envelope_of(payload: Any) -> Envelope:
    """Which request Welt sent: `messages` (a conversation turn) or `interrupt_responses`
    (answers resuming a run). The two keys are exclusive and nothing else is sent.

    Raises:
        InvalidWeltPayload: not an object with exactly one of the two keys.
    """
    if not isinstance(payload, Mapping):
        raise InvalidWeltPayload("payload", f"must be a JSON object, not {type(payload).__name__}")
    keys = string_keys(payload, "payload")
    if keys == {"messages"}:
        return "messages"
    if keys == {"interrupt_responses"}:
        return "interrupt_responses"
    raise InvalidWeltPayload(
        "payload",
        f"must have exactly one of `messages` or `interrupt_responses`, has {sorted(keys)}",
    )


@dataclass(frozen=True)
class WeltAnswer:
    """One answer: the question it answers (an interrupt id), the value, and the widget it came
    from (`option`: a pressed button, its declared value; `input`: the submitted text)."""

    interrupt_id: str
    value: Any
    source: Source


def parse_interrupt_responses(responses: Any) -> tuple[WeltAnswer, ...]:
    """Read `interrupt_responses` (`{id: {"value": ..., "source": "option" | "input"}}`).

    Accepts the whole payload too (`{"interrupt_responses": {...}}`).

    Raises:
        InvalidWeltPayload: the mapping is empty or not an object, an answer has other keys, an
            unknown source, or typed text that is not a non-blank string.
    """
    if isinstance(responses, Mapping) and set(responses) == {"interrupt_responses"}:
        responses = responses["interrupt_responses"]
    where = "interrupt_responses"
    if not isinstance(responses, Mapping) or not responses:
        raise InvalidWeltPayload(where, "must be a non-empty object of answers by interrupt id")
    answers: list[WeltAnswer] = []
    for interrupt_id, answer in responses.items():
        at = f"{where}[{interrupt_id!r}]"
        if (problem := name_problem(interrupt_id)) is not None:
            raise InvalidWeltPayload(at, f"an interrupt id {problem}")
        if not isinstance(answer, Mapping) or set(answer) != {"value", "source"}:
            raise InvalidWeltPayload(at, 'an answer is {"value": ..., "source": ...} and no more')
        source = answer["source"]
        if source == "option":
            answers.append(WeltAnswer(interrupt_id, answer["value"], "option"))
        elif source == "input":
            text = answer["value"]
            if not isinstance(text, str) or not text.strip():
                raise InvalidWeltPayload(f"{at}.value", "typed text must be a non-blank string")
            if (problem := text_problem(text)) is not None:
                raise InvalidWeltPayload(f"{at}.value", f"typed text {problem}")
            answers.append(WeltAnswer(interrupt_id, text, "input"))
        else:
            raise InvalidWeltPayload(f"{at}.source", f"is 'option' or 'input', not {source!r}")
    return tuple(answers)
