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
