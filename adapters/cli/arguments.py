"""How the command line is read: one-line usage errors, global options on every command, and
argument types that refuse what the database or the encoders would choke on (values outside
PostgreSQL's integer ranges, bytes that are not UTF-8, NUL, JSON nested too deeply)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from typing import Any, NoReturn

from approvals import InvalidReviewerId
from approvals.identity import group_name, reviewer_id

from .output import safe

__all__ = [
    "BIGINT_MAX",
    "INT_MAX",
    "JSON_MAX_DEPTH",
    "Parser",
    "add_global_options",
    "add_read_option",
    "all_parsers",
    "identifier",
    "json_object",
    "leaf_parsers",
    "position",
    "positive_int",
    "reviewer",
    "reviewer_group",
    "text",
]

INT_MAX = 2**31 - 1  # PostgreSQL integer
BIGINT_MAX = 2**63 - 1  # PostgreSQL bigint (journal positions)
JSON_MAX_DEPTH = 64  # deeper JSON from the command line is a mistake, not an argument

LOG_LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR"]


class Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line on stderr (exit 2), like every other
    error of the command; `--help` shows the usage."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        # "error: " like every other error of the command, so scripts can match one prefix.
        print(f"error: {safe(message)} (see `{self.prog} --help`)", file=sys.stderr)
        raise SystemExit(2)


def add_global_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """`--database-url` and `--log-level`. Below the top level they default to SUPPRESS, so
    that a value given before the command is not overwritten by the command's default."""
    default_url: Any = None if top else argparse.SUPPRESS
    default_level: Any = "WARNING" if top else argparse.SUPPRESS
    parser.add_argument(
        "--database-url",
        type=text,
        default=default_url,
        metavar="URL",
        help="PostgreSQL URL (default: $SIGNOFF_DATABASE_URL, $DATABASE_URL, else the embedded "
        "server)",
    )
    parser.add_argument(
        "--log-level",
        default=default_level,
        type=str.upper,
        choices=LOG_LEVELS,
        help="log level, on stderr (default: WARNING)",
    )


def add_read_option(parser: argparse.ArgumentParser) -> None:
    """`--read-database-url`, on the commands that only read (verify, export, proofs)."""
    parser.add_argument(
        "--read-database-url",
        type=text,
        metavar="URL",
        help="read from this hot standby of the database, read-only, and say how far behind "
        "it is (default: $SIGNOFF_READ_DATABASE_URL, else the database itself)",
    )


def all_parsers(
    parser: argparse.ArgumentParser, words: list[str] | None = None
) -> Iterator[tuple[list[str], argparse.ArgumentParser]]:
    """`parser` and every parser under it, each with its command words."""
    words = words or []
    yield words, parser
    for child_words, child in _children(parser, words):
        yield from all_parsers(child, child_words)


def leaf_parsers(
    parser: argparse.ArgumentParser,
) -> Iterator[tuple[list[str], argparse.ArgumentParser]]:
    """The parsers under `parser` that have no subcommands: the commands that run."""
    for words, child in all_parsers(parser):
        if not any(_children(child, words)):
            yield words, child


def _children(
    parser: argparse.ArgumentParser, words: list[str]
) -> Iterator[tuple[list[str], argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield [*words, name], child


# -- argument types ------------------------------------------------------------------------------


def text(value: str) -> str:
    """Text that can be stored: valid UTF-8 (argv bytes that are not arrive as lone surrogates)
    and no NUL, which PostgreSQL text cannot hold."""
    for i, char in enumerate(value):
        if "\ud800" <= char <= "\udfff":
            raise argparse.ArgumentTypeError(
                f"not valid UTF-8 at character {i + 1}: '{safe(value)}'"
            )
    if "\x00" in value:
        raise argparse.ArgumentTypeError(f"contains a NUL character: '{safe(value)}'")
    return value


def identifier(value: str) -> str:
    """An id or a name: `text`, not blank, and no control characters."""
    text(value)
    if not value.strip():
        raise argparse.ArgumentTypeError(f"must not be blank: {value!r}")
    if safe(value) != value:
        raise argparse.ArgumentTypeError(f"contains control characters: '{safe(value)}'")
    return value


def reviewer(value: str) -> str:
    """A reviewer id, normalised as everywhere else (`approvals.identity.reviewer_id`)."""
    try:
        return reviewer_id(text(value))
    except InvalidReviewerId as e:
        raise argparse.ArgumentTypeError(safe(e)) from e


def reviewer_group(value: str) -> str:
    """A group name of the reviewer directory, normalised like a reviewer id."""
    try:
        return group_name(text(value))
    except InvalidReviewerId as e:
        raise argparse.ArgumentTypeError(safe(e).replace("reviewer id", "group", 1)) from e


def _whole(value: str) -> int:
    try:
        return int(value.strip())
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not a whole number: '{safe(value)}'") from e


def positive_int(value: str) -> int:
    """A whole number from 1 to PostgreSQL's integer maximum."""
    number = _whole(value)
    if not 1 <= number <= INT_MAX:
        raise argparse.ArgumentTypeError(f"must be from 1 to {INT_MAX}, not {number}")
    return number


def position(value: str) -> int:
    """A journal position: a whole number from 0 to PostgreSQL's bigint maximum."""
    number = _whole(value)
    if not 0 <= number <= BIGINT_MAX:
        raise argparse.ArgumentTypeError(f"must be from 0 to {BIGINT_MAX}, not {number}")
    return number


def json_object(value: str) -> dict[str, Any]:
    """A JSON object of at most `JSON_MAX_DEPTH` levels whose strings are storable `text`."""
    text(value)
    try:
        parsed = json.loads(value)
    except RecursionError:
        raise argparse.ArgumentTypeError(
            f"JSON nested more than {JSON_MAX_DEPTH} levels deep"
        ) from None
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not valid JSON: {e}") from e
    if not isinstance(parsed, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object, not {type(parsed).__name__}")
    _check_json(parsed)
    return parsed


def _check_json(value: Any) -> None:
    """Depth and strings, iteratively: recursion is what this refuses."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > JSON_MAX_DEPTH:
            raise argparse.ArgumentTypeError(f"JSON nested more than {JSON_MAX_DEPTH} levels deep")
        if isinstance(item, dict):
            for key, child in item.items():
                text(key)
                stack.append((child, depth + 1))
        elif isinstance(item, list):
            stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, str):
            text(item)
