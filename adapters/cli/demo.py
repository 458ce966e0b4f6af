"""`signoff demo`: the README's main job, end to end on one database."""

from __future__ import annotations

import argparse

from .output import add_json_flag


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = groups.add_parser(
        "demo",
        help="a support agent's refund, approved by a person and run once across two processes",
        description="Migrate the database, run a scripted support agent (no API key) until its "
        "refund waits for approval, approve it, resume it in a second process, then show that "
        "the refund ran once, the ledger of the run and a verified signed digest. Each run uses "
        "a new run id, so it can run any number of times on one database.",
        epilog="""\
examples:
  signoff demo                     on the embedded server (started on first use)
  signoff demo --database-url postgresql://postgres@localhost/signoff_demo
  signoff demo --json | jq .refund
""",
    )
    add_json_flag(demo)
    demo.set_defaults(run=_demo)


def _demo(args: argparse.Namespace) -> int:
    from adapters.demo import run_demo  # only this command needs it (and the demo extra)

    from .context import settings_of

    return run_demo(settings=settings_of(args), log_level=args.log_level.upper(), as_json=args.json)
