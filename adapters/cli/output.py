"""How commands print: readable text by default, one JSON document with `--json`."""

from __future__ import annotations

import argparse
import json
from typing import Any


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON for machines")


def emit(args: argparse.Namespace, text: str, data: dict[str, Any]) -> None:
    """Print `data` as JSON when `--json` was given, else `text`."""
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2, default=str))
    else:
        print(text)


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from e
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value
