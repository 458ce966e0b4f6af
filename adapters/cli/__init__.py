"""The `signoff` command.

Every error is one line on stderr and exit 2: Signoff's own errors say what to do, a usage error
names the argument, and anything unforeseen is still one line (`--log-level DEBUG` adds the
traceback).
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence
from typing import cast

from ledger import SignoffError, __version__
from ledger.log import configure_logging

from . import (
    approvals,
    checkpoints,
    db,
    demo,
    doctor,
    embedded,
    keys,
    ledger_commands,
    mcp,
    policy,
    reviewers,
    serve,
    tokens,
)
from .arguments import Parser, add_global_options, all_parsers
from .output import safe

__all__ = ["build_parser", "main"]

_EXAMPLES = """\
examples:
  signoff demo                          the main job, end to end, on the embedded server
  signoff db upgrade                    migrate the schema to head
  signoff doctor                        check the database, schema, keys and horizon
  signoff keys new-kek --out ~/.config/signoff/kek
  signoff ledger calls --status outcome_unknown
  signoff approvals list --status pending --json
  signoff reviewers add alice --group support-leads
  signoff policy publish refunds.cedar --by carol
  signoff tokens create --reviewer alice --expires 30d
  signoff serve --host 127.0.0.1 --port 8600
  signoff db current --database-url postgresql://app@db.internal/signoff

Options such as --database-url, --log-level and --json go before or after the command.
Errors are one line on stderr with exit status 2.
"""


def build_parser() -> Parser:
    parser = Parser(
        prog="signoff",
        description="Approvals and a once-per-run tool-call ledger for AI agents, on PostgreSQL.",
        epilog=_EXAMPLES,
    )
    parser.add_argument("--version", action="version", version=f"signoff {__version__}")
    add_global_options(parser, top=True)
    # Typed as plain parsers for the modules; every one of them is a `Parser` all the same.
    groups = cast(
        "argparse._SubParsersAction[argparse.ArgumentParser]",
        parser.add_subparsers(
            dest="group", required=True, metavar="COMMAND", help="what to work on"
        ),
    )
    db.register(groups)
    doctor.register(groups)
    keys.register(groups)
    ledger_commands.register(groups)
    approvals.register(groups)
    reviewers.register(groups)
    policy.register(groups)
    tokens.register(groups)
    serve.register(groups)
    mcp.register(groups)
    checkpoints.register(groups)
    demo.register(groups)
    embedded.register(groups)
    # Every command below the top takes the global options too, commands added later included.
    for words, sub in all_parsers(parser):
        if words:
            add_global_options(sub, top=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        code = _main(argv)
        sys.stdout.flush()  # a reader that went away shows here, not at interpreter exit
    except SystemExit:  # argparse's --help and usage errors: their output may meet a closed pipe
        _flush_or_silence()
        raise
    except BrokenPipeError:
        _silence_stdout()
        return 1
    return code


def _flush_or_silence() -> None:
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()


def _silence_stdout() -> None:
    """The reader went away (`signoff ... | head`): stop quietly. Output still buffered would
    fail again when Python flushes stdout at exit, so point stdout at devnull."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _main(argv: Sequence[str] | None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # --help, --version, a usage error (already printed, one line)
        return e.code if isinstance(e.code, int) else 0 if e.code is None else 2
    configure_logging(args.log_level)
    try:
        code: int = args.run(args)
        sys.stdout.flush()  # inside the try: a closed pipe shows here, not at exit
    except SignoffError as e:
        print(f"error: {safe(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        raise
    except Exception as e:  # a bug or an error nobody translated: still one line
        if args.log_level == "DEBUG":
            traceback.print_exc()
        print(
            f"error: unexpected {type(e).__name__}: {safe(e)} "
            "(--log-level DEBUG shows the traceback)",
            file=sys.stderr,
        )
        return 2
    return code
