"""`signoff ledger calls | show | export | resolve`: the tool-call ledger, for people."""

from __future__ import annotations

import argparse
import asyncio
import csv
import getpass
import io
import json
import sys
from datetime import UTC, datetime
from typing import Any

from ledger.audit.export import export_events
from ledger.audit.queries import (
    CallFilter,
    CallStory,
    call_story,
    call_summary,
    find_calls,
    policy_decision,
    story_summary,
)
from ledger.calls.model import CallStatus
from ledger.calls.service import ToolLedger
from ledger.journal.reader import newest_position
from ledger.keys import KeyRing
from ledger.store import Database

from .arguments import add_read_option, identifier, position, positive_int, text
from .context import lag_of, open_database, open_reading_database
from .output import add_json_flag, csv_cell, emit, safe
from .progress import progress_bar, shows_progress

_CALLS_EXAMPLES = """\
examples:
  signoff ledger calls --run demo-1a2b3c4d
  signoff ledger calls --status outcome_unknown --since 2025-01-01
  signoff ledger calls --tool refund --csv > refunds.csv
  signoff ledger calls --json | jq '.calls[].status'
"""
_SHOW_EXAMPLES = """\
examples:
  signoff ledger show demo-1a2b3c4d call-refund
  signoff ledger show demo-1a2b3c4d call-refund --reveal --by alice    (the reveal is recorded)
"""
_EXPORT_EXAMPLES = """\
examples:
  signoff ledger export > journal.jsonl
  signoff ledger export --after 41250 >> journal.jsonl     (resume after the last exported)
"""
_RESOLVE_EXAMPLES = """\
examples:
  signoff ledger resolve demo-1a2b3c4d call-refund --succeeded --by alice --note "seen in Stripe"
  signoff ledger resolve demo-1a2b3c4d call-refund --failed --by alice
"""

_COLUMNS = [
    "run_id",
    "call_id",
    "tool",
    "effect",
    "status",
    "attempts",
    "approval_id",
    "approved_by",
    "args_digest",
    "result_digest",
    "resolved_by",
    "started_at",
    "finished_at",
]


def _when(text: str) -> datetime:
    """An ISO 8601 time; without a zone it is UTC."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from e
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    calls = commands.add_parser(
        "calls", help="tool calls, oldest first, with filters", epilog=_CALLS_EXAMPLES
    )
    calls.add_argument(
        "--run", dest="run_id", metavar="RUN", type=identifier, help="only this run id"
    )
    calls.add_argument("--tool", metavar="TOOL", type=identifier, help="only this tool")
    calls.add_argument(
        "--status", choices=[s.value for s in CallStatus], help="only calls in this status"
    )
    calls.add_argument("--since", type=_when, metavar="ISO", help="started at or after")
    calls.add_argument("--until", type=_when, metavar="ISO", help="started before")
    calls.add_argument(
        "--approved-by", metavar="WHO", type=identifier, help="only calls this reviewer approved"
    )
    calls.add_argument(
        "--limit", type=positive_int, default=1000, help="at most this many (default 1000)"
    )
    formats = calls.add_mutually_exclusive_group()
    formats.add_argument("--json", action="store_true", help="print JSON for machines")
    formats.add_argument("--csv", action="store_true", help="print CSV for spreadsheets")
    add_read_option(calls)
    calls.set_defaults(run=lambda a: asyncio.run(_calls(a)))

    show = commands.add_parser("show", help="the whole story of one call", epilog=_SHOW_EXAMPLES)
    show.add_argument("run_id", metavar="RUN", type=identifier, help="the run id")
    show.add_argument("call_id", metavar="CALL", type=identifier, help="the call id in the run")
    show.add_argument(
        "--reveal",
        action="store_true",
        help="decrypt the arguments and the result (recorded in the journal)",
    )
    show.add_argument(
        "--by", metavar="WHO", type=identifier, help="who reveals (with --reveal; default: you)"
    )
    add_json_flag(show)
    show.set_defaults(run=lambda a: asyncio.run(_show(a)))

    export = commands.add_parser(
        "export",
        help="journal events in the global order, one JSON object per line",
        description="Journal events in the global order, one JSON object per line (JSONL), each "
        "with what a reader needs to recheck its hash chain.",
        epilog=_EXPORT_EXAMPLES,
    )
    export.add_argument(
        "--format", choices=["jsonl"], default="jsonl", help="output format (default: jsonl)"
    )
    export.add_argument(
        "--after",
        type=position,
        default=0,
        metavar="POSITION",
        help="resume after the event at this position (default: from the start)",
    )
    export.add_argument(
        "--json", action="store_true", help="the same JSONL (accepted like on every command)"
    )
    add_read_option(export)
    export.set_defaults(run=lambda a: asyncio.run(_export(a)))

    resolve = commands.add_parser(
        "resolve",
        help="settle an outcome_unknown call",
        description="Settle a call whose outcome is unknown (its worker died mid-call), after "
        "checking in the target system whether it took effect. The verdict is signed with the "
        "decision key: this needs the reviewer-side KEK (SIGNOFF_REVIEWER_KEK_FILE).",
        epilog=_RESOLVE_EXAMPLES,
    )
    resolve.add_argument("run_id", metavar="RUN", type=identifier, help="the run id")
    resolve.add_argument("call_id", metavar="CALL", type=identifier, help="the call id")
    verdict = resolve.add_mutually_exclusive_group(required=True)
    verdict.add_argument("--succeeded", action="store_true", help="it did take effect")
    verdict.add_argument("--failed", action="store_true", help="it did not take effect")
    resolve.add_argument(
        "--by", required=True, metavar="WHO", type=identifier, help="who settles it"
    )
    resolve.add_argument("--note", type=text, help="what was checked")
    add_json_flag(resolve)
    resolve.set_defaults(run=lambda a: asyncio.run(_resolve(a)))


async def _calls(args: argparse.Namespace) -> int:
    where = CallFilter(
        run_id=args.run_id,
        tool=args.tool,
        status=CallStatus(args.status) if args.status else None,
        since=args.since,
        until=args.until,
        approved_by=args.approved_by,
        limit=args.limit,
    )
    async with open_reading_database(args) as db:
        rows = [call_summary(call) for call, _ in await find_calls(db, where)]
    if args.csv:
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=_COLUMNS, lineterminator="\n")
        writer.writeheader()
        # A name may hold a comma: the approvers are a JSON array in one cell.
        writer.writerows(
            {k: csv_cell(json.dumps(v) if isinstance(v, list) else v) for k, v in r.items()}
            for r in rows
        )
        sys.stdout.write(out.getvalue())
        return 0
    lines = [f"{'RUN':<24} {'CALL':<20} {'TOOL':<16} {'STATUS':<16} {'APPROVED BY':<16} STARTED"]
    lines += [
        f"{safe(r['run_id']):<24} {safe(r['call_id']):<20} {safe(r['tool']):<16} "
        f"{r['status']:<16} {safe(', '.join(r['approved_by']) or '-'):<16} {r['started_at']}"
        for r in rows
    ]
    data: dict[str, Any] = {"calls": rows}
    if (lag := lag_of(args)) is not None:
        data["standby"] = lag.to_dict()
    emit(args, "\n".join(lines), data)
    return 0


async def _show(args: argparse.Namespace) -> int:
    async with open_database(args) as db:
        ring = await KeyRing.open(db, create_missing=False) if args.reveal else None
        revealer = (args.by or getpass.getuser()) if args.reveal else None
        story = await call_story(db, args.run_id, args.call_id, reveal_by=revealer, ring=ring)
    emit(args, _story_text(story, args.reveal), story_summary(story, revealed=args.reveal))
    return 0


def _short(digest: str) -> str:
    """The first hex digits of a digest (keyed `hmac:<key id>:<hex>`, or plain hex)."""
    return digest.rpartition(":")[2][:16]


def _story_text(story: CallStory, revealed: bool) -> str:
    call = story.call
    lines = [
        f"call {safe(call.call_id)} of run {safe(call.run_id)}: {safe(call.tool)} "
        f"({call.effect}), {call.status} after {call.attempts} attempt(s)",
        f"  idempotency key {safe(call.idempotency_key)}; arguments {_short(call.args_digest)}…; "
        f"result {_short(call.result_digest or '-')}…",
    ]
    if call.approval_id:
        lines.append(
            f"  approval {safe(call.approval_id)}, "
            f"approved by {safe(', '.join(story.approved_by) or '-')}"
        )
    decided = policy_decision(story)
    if decided is not None:
        policies = ", ".join(safe(str(i)) for i in decided.get("policies", [])) or "-"
        lines.append(
            f"  policy: {safe(str(decided.get('outcome')))} by set version "
            f"{decided.get('version')} ({safe(str(decided.get('mode')))}; {policies}): "
            f"{safe(str(decided.get('reason', '')))}"
        )
    for event in sorted([*story.approval_events, *story.events], key=lambda e: e.position):
        written = f" (login {safe(event.login)})" if event.login is not None else ""
        lines.append(
            f"  {event.recorded_at.isoformat()}  {safe(event.type):<22} by {safe(event.actor)}"
            + written
        )
    if revealed:
        lines.append(f"  arguments: {json.dumps(story.args)}")
        lines.append(f"  result: {json.dumps(story.result)}")
    return "\n".join(lines)


async def _export(args: argparse.Namespace) -> int:
    async with open_reading_database(args) as db:
        total = await _events_after(db, args.after) if shows_progress(args) else None
        with progress_bar(args, "exporting", total=total) as advance:
            async for exported in export_events(db, after=args.after):
                sys.stdout.write(json.dumps(exported.to_dict()) + "\n")
                advance(1)
    return 0


async def _events_after(db: Database, after: int) -> int:
    """About how many events follow `after` (positions have gaps; enough for a bar)."""
    async with db.connection() as conn:
        return max(0, await newest_position(conn) - after)


async def _resolve(args: argparse.Namespace) -> int:
    async with open_database(args) as db:
        ledger = ToolLedger(db, await KeyRing.open(db, create_missing=False))
        record = await ledger.resolve(
            args.run_id, args.call_id, succeeded=args.succeeded, by=args.by, note=args.note
        )
        await ledger.close()
    shown = (
        f"call {safe(record.call_id)} of run {safe(record.run_id)} resolved as {record.status} "
        f"by {safe(args.by)}"
    )
    emit(args, shown, call_summary(record))
    return 0
