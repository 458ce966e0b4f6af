"""The `signoff` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ledger import SignoffError, __version__
from ledger.log import configure_logging

from . import approvals, checkpoints, db, demo, embedded, keys, ledger_commands

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="signoff",
        description="Approvals and a once-per-run tool-call ledger for AI agents, on PostgreSQL.",
    )
    parser.add_argument("--version", action="version", version=f"signoff {__version__}")
    parser.add_argument(
        "--database-url",
        help="PostgreSQL URL (default: $SIGNOFF_DATABASE_URL, $DATABASE_URL, else the embedded "
        "server)",
    )
    parser.add_argument(
        "--log-level",
        default="WARNING",
        type=str.upper,
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="log level (default: WARNING)",
    )
    groups = parser.add_subparsers(dest="group", required=True, metavar="COMMAND")
    db.register(groups)
    keys.register(groups)
    ledger_commands.register(groups)
    approvals.register(groups)
    checkpoints.register(groups)
    demo.register(groups)
    embedded.register(groups)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level)
    try:
        code: int = args.run(args)
    except SignoffError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return code
