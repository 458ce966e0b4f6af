"""Text fit for a terminal, for every adapter that prints (the CLI, the demo).

Text shown to a person comes from stored data that agents and models chose (tool names, ids,
reasons): an escape sequence or a carriage return in a tool name must not rewrite the screen or
forge a row, so every such value goes through `safe` first.
"""

from __future__ import annotations

import re

__all__ = ["safe"]

# C0 controls, DEL, C1 controls, the bidirectional overrides, embeddings, isolates and marks
# (U+202E shows text backwards), the line and paragraph separators, and lone surrogates (bytes
# that were not UTF-8).
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
_UNSAFE_BUT_NEWLINE = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
    "\ud800-\udfff]"
)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def safe(value: object, *, keep_newlines: bool = False) -> str:
    """`value` as text fit for a terminal: control characters, bidi controls and lone
    surrogates are shown escaped (`\\x1b`, `\\u202e`); newlines too unless `keep_newlines`."""
    pattern = _UNSAFE_BUT_NEWLINE if keep_newlines else _UNSAFE
    return pattern.sub(_escape, str(value))
