"""What Signoff stores, and what it refuses: the rules for text, JSON values and integers.

Every entry point checks its input with these before it writes anything, and turns a problem
into its own typed error (`InvalidEvent`, `InvalidToolCall`, `InvalidApprovalRequest`, ...).

- Text (ids, names, reasons, every string inside JSON, dict keys too): no NUL character and no
  lone surrogate (U+D800-U+DFFF): PostgreSQL text cannot hold NUL, and neither can be encoded
  as UTF-8.
- JSON values: dicts with string keys only (`{1: "a"}` would be stored as `{"1": "a"}`), lists
  and tuples (stored as arrays), strings, booleans, None, integers of at most
  `MAX_JSON_INT_DIGITS` digits, finite floats. At most `MAX_JSON_DEPTH` nested arrays and
  objects. Checked without recursion, so no input can exhaust the stack.
- Integers that reach a column: `INT4` (versions) or `INT8` (positions, limits).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

__all__ = [
    "INT4",
    "INT8",
    "MAX_JSON_DEPTH",
    "MAX_JSON_INT_DIGITS",
    "containers_ok",
    "int_problem",
    "json_problem",
    "json_text_ok",
    "json_text_problem",
    "name_problem",
    "text_problem",
]

MAX_JSON_DEPTH = 64
"""Most arrays and objects nested in one JSON value (`{"a": [1]}` is 2 deep)."""
MAX_JSON_INT_DIGITS = 4300
"""Longest integer in JSON (digits): Python's own limit for reading one back."""
INT4 = (-(2**31), 2**31 - 1)
"""PostgreSQL `integer`: stream versions."""
INT8 = (-(2**63), 2**63 - 1)
"""PostgreSQL `bigint`: journal positions, row limits."""

_BAD_CHAR = re.compile("[\x00\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")
# `\u0000` in JSON text that is an escape, not the text of an escaped backslash before "u0000".
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
_CONTAINERS = (dict, list, tuple)
_LEAVES = frozenset({str, int, float, bool, type(None)})
# Bits of the smallest integer with more than MAX_JSON_INT_DIGITS digits, give or take one.
_INT_BITS = math.ceil(MAX_JSON_INT_DIGITS * math.log2(10))
_INT_LIMIT = 10**MAX_JSON_INT_DIGITS
# JSON text: a string (escapes included) or one bracket; the depth scan skips strings whole.
_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


def text_problem(text: str) -> str | None:
    """Why `text` cannot be stored (a NUL or a lone surrogate), or None."""
    found = _BAD_CHAR.search(text)
    if found is None:
        return None
    if found.group() == "\x00":
        return f"contains a NUL character (at {found.start()})"
    return f"contains a lone surrogate U+{ord(found.group()):04X} (at {found.start()})"


def name_problem(value: object, max_length: int | None = None) -> str | None:
    """Why `value` is no usable id or name (not a string, blank, bad text, too long), or None."""
    if not isinstance(value, str):
        return f"must be a non-empty string, not {type(value).__name__}"
    if not value.strip():
        return f"must be a non-empty string, not {value!r}"
    if max_length is not None and len(value) > max_length:
        return f"is longer than {max_length} characters"
    return text_problem(value)


def int_problem(value: object, bounds: tuple[int, int]) -> str | None:
    """Why `value` is no integer within `bounds` (inclusive), or None. Booleans are refused."""
    if isinstance(value, bool) or not isinstance(value, int):
        return f"must be an integer, not {type(value).__name__}"
    low, high = bounds
    if not low <= value <= high:
        return f"must be between {low} and {high}, not {value}"
    return None


def json_problem(value: Any) -> str | None:
    """Why `value` is not storable JSON (see the module docstring), with where, or None."""
    # (value, depth of the containers around it, path as nested (parent, key) pairs)
    stack: list[tuple[Any, int, Any]] = [(value, 0, None)]
    while stack:
        item, depth, path = stack.pop()
        if isinstance(item, str):
            problem = text_problem(item)
        elif item is None or isinstance(item, bool):
            problem = None
        elif isinstance(item, int):
            problem = _int_json_problem(item)
        elif isinstance(item, float):
            problem = None if math.isfinite(item) else f"{item} is not a JSON number"
        elif isinstance(item, dict | list | tuple):
            if depth >= MAX_JSON_DEPTH:
                problem = f"nested deeper than {MAX_JSON_DEPTH} arrays and objects"
            elif isinstance(item, dict):
                problem = None
                for key, child in item.items():
                    if not isinstance(key, str):
                        problem = f"a key is a {type(key).__name__}; JSON keys are strings"
                        break
                    if (key_problem := text_problem(key)) is not None:
                        problem = f"a key {key_problem}"
                        break
                    stack.append((child, depth + 1, (path, key)))
            else:
                stack.extend((child, depth + 1, (path, i)) for i, child in enumerate(item))
                problem = None
        else:
            problem = f"a {type(item).__name__} is not a JSON value"
        if problem is not None:
            return f"{_render(path)}: {problem}"
    return None


def containers_ok(value: Any) -> bool:
    """The cheap half of `json_problem`, for the encoder's hot path: only arrays and objects
    are visited (depth, key types); the encoder refuses bad leaves itself and `json_text_ok`
    checks its output's text. A cycle is found as nesting too deep."""
    if not isinstance(value, _CONTAINERS):
        return True
    stack = [(value, 0)]
    pop, push = stack.pop, stack.append
    while stack:
        item, depth = pop()
        if depth >= MAX_JSON_DEPTH:
            return False
        children: Iterable[Any] = item
        if isinstance(item, dict):
            for key in item:
                if type(key) is not str and not isinstance(key, str):
                    return False
            children = item.values()
        for child in children:
            if type(child) not in _LEAVES and isinstance(child, _CONTAINERS):
                push((child, depth + 1))
    return True


def json_text_ok(text: str) -> bool:
    """Whether canonical JSON text (`ensure_ascii=False`) holds no NUL and no lone surrogate."""
    if not text.isascii() and _SURROGATE.search(text) is not None:
        return False
    return "\\u0000" not in text or _NUL_ESCAPE.search(text) is None


def json_text_problem(text: str | bytes, max_depth: int = MAX_JSON_DEPTH) -> str | None:
    """Why JSON `text` nests too deep to parse safely, or None; check it before `json.loads`
    (which recurses). Not a syntax check: `json.loads` does that."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    depth = 0
    for match in _JSON_TOKEN.finditer(text):
        first = match.group()[0]
        if first in "[{":
            depth += 1
            if depth > max_depth:
                return f"nested deeper than {max_depth} arrays and objects"
        elif first in "]}":
            depth -= 1
    return None


def _int_json_problem(value: int) -> str | None:
    if value.bit_length() < _INT_BITS - 4 or abs(value) < _INT_LIMIT:
        return None
    return f"an integer of more than {MAX_JSON_INT_DIGITS} digits"


def _render(path: Any) -> str:
    keys: list[str] = []
    while path is not None:
        path, key = path
        keys.append(f"[{key}]" if isinstance(key, int) else f"[{_shown(key)}]")
    keys.reverse()
    if len(keys) > 8:  # nested too deep: the way in and out, not all 64 steps
        keys[4:-2] = [f"...{len(keys) - 6} more..."]
    return "$" + "".join(keys)


def _shown(key: str) -> str:
    """A key as it appears in a path: quoted, control characters escaped, clipped."""
    text = repr(key)
    return text if len(text) <= 40 else text[:37] + "..."
