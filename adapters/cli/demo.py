"""`signoff demo`: the README's main job, end to end on one database."""

from __future__ import annotations

import argparse
import re

from .output import add_json_flag, safe

_WAIT = re.compile(r"([1-9][0-9]{0,5})([smh]?)")
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600}
_MAX_WAIT = 24 * 3600
_DEFAULT_WAIT = 15 * 60.0  # as `adapters.demo.INBOX_WAIT`, which needs the demo extra to import


def wait_time(text: str) -> float:
    """`15m`, `90s`, `2h` or a number of seconds: how long `--inbox` waits (at most 24 h)."""
    match = _WAIT.fullmatch(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(
            f"{safe(text)!r} is no time: a whole number of seconds, or with s, m or h (15m)"
        )
    seconds = int(match.group(1)) * _SECONDS[match.group(2)]
    if seconds > _MAX_WAIT:
        raise argparse.ArgumentTypeError("at most 24h")
    return float(seconds)


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = groups.add_parser(
        "demo",
        help="a support agent's refund, approved by a person and run once across two processes",
        description="Migrate the database, run a scripted support agent (no API key) until its "
        "refund waits for approval, serve the HTTP API on loopback and approve the refund "
        "through it with a short-lived API token, resume the agent in a second process, then "
        "show that the refund ran once, the ledger of the run and a verified signed digest. "
        "Each run uses a new run id, so it can run any number of times on one database.",
        epilog="""\
examples:
  signoff demo                     on the embedded server (started on first use)
  signoff demo --database-url postgresql://postgres@localhost/signoff_demo
  signoff demo --json | jq .refund
  signoff demo --inbox             you decide the refund: sign in with the link it prints
  signoff demo --inbox --wait 1h   ... and take up to an hour to decide
""",
    )
    demo.add_argument(
        "--inbox",
        action="store_true",
        help="do not approve: print a sign-in link to the web inbox and the API token, and "
        "wait for a person to decide the refund (with --json, on stderr)",
    )
    demo.add_argument(
        "--wait",
        type=wait_time,
        metavar="TIME",
        help="with --inbox, how long to wait for the decision: 15m (default), 90s, 1h; "
        "nobody deciding in time is an error (exit 2), and the approval is withdrawn",
    )
    add_json_flag(demo)
    demo.set_defaults(run=lambda args: _demo(args, demo))


def _demo(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.wait is not None and not args.inbox:  # nothing waits without --inbox: say so
        parser.error("--wait goes with --inbox only")
    from adapters.demo import run_demo  # only this command needs it (and the demo extra)

    from .context import settings_of

    return run_demo(
        settings=settings_of(args),
        log_level=args.log_level.upper(),
        as_json=args.json,
        inbox=args.inbox,
        wait=_DEFAULT_WAIT if args.wait is None else args.wait,
    )
