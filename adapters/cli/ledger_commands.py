"""`signoff ledger ...`: verify the journal (and, later, query and prove the tool-call ledger)."""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import asdict

from ledger import Journal, VerifyReport

from .context import open_database
from .output import add_json_flag, emit


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ledger = groups.add_parser("ledger", help="the journal and the tool-call ledger")
    commands = ledger.add_subparsers(dest="command", required=True, metavar="COMMAND")
    verify = commands.add_parser(
        "verify", help="recompute every hash chain; exit 1 and name the first bad event if any"
    )
    add_json_flag(verify)
    verify.set_defaults(run=_verify)


def _verify(args: argparse.Namespace) -> int:
    report = asyncio.run(_verify_journal(args))
    first = report.first_bad
    if first is None:
        text = f"journal intact: {report.events} events in {report.streams} streams"
    else:
        text = (
            f"journal TAMPERED: {len(report.bad)} bad event(s); first: stream {first.stream_id!r} "
            f"version {first.version} position {first.position}: {first.problem}"
        )
    emit(
        args,
        text,
        {
            "ok": report.ok,
            "events": report.events,
            "streams": report.streams,
            "bad": [asdict(b) for b in report.bad],
        },
    )
    return 0 if report.ok else 1


async def _verify_journal(args: argparse.Namespace) -> VerifyReport:
    async with open_database(args) as db:
        return await Journal(db).verify()
