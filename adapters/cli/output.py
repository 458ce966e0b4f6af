"""How commands print: readable text by default, one JSON document with `--json`.

Text shown to a person comes from stored data that agents and models chose (tool names, ids,
reasons), so every value goes through `safe` before it reaches a terminal: an escape sequence or
a carriage return in a tool name must not rewrite the screen or forge a row. CSV cells go
through `csv_cell`, which also keeps a spreadsheet from running them as formulas.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ledger import SignoffError
from ledger.errors import DigestError

from ..terminal import safe

__all__ = [
    "OutputError",
    "add_json_flag",
    "csv_cell",
    "emit",
    "read_document",
    "safe",
    "wants_json",
    "write_document",
]

# What a spreadsheet takes for a formula (OWASP's CSV injection list).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: object) -> object:
    """A CSV cell: text made `safe`, and prefixed with `'` when a spreadsheet would read it as
    a formula. Numbers and empty cells stay as they are."""
    if not isinstance(value, str):
        return value
    shown = safe(value)
    return "'" + shown if value.startswith(_FORMULA_START) else shown


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON for machines")


def wants_json(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "json", False))


def emit(args: argparse.Namespace, text: str, data: dict[str, Any]) -> None:
    """Print `data` as JSON when `--json` was given, else `text` (lines made `safe`: callers
    pass stored values through `safe` too, so that a newline in one cannot forge a line)."""
    if wants_json(args):
        print(json.dumps(data, indent=2, default=str))
    else:
        print(safe(text, keep_newlines=True))


class OutputError(SignoffError):
    """A file the command was asked to write could not be written."""


def read_document(path: Path) -> str:
    """The text of `path`: a document a command is given (a digest, a proof, keys, a note)."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise DigestError(f"cannot read {path}: {e}") from e


def write_document(path: Path, document: str) -> None:
    """Write `document` to `path` (the `--out` of a command)."""
    try:
        path.write_text(document, encoding="utf-8")
    except OSError as e:
        raise OutputError(f"cannot write {path}: {e.strerror or e}") from e
