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

from ledger.audit import CallFilter, CallStory, call_story, find_calls
from ledger.export import export_events
from ledger.keys import KeyRing
from ledger.tool_calls import CallRecord, CallStatus
from ledger.tool_ledger import ToolLedger

from .context import open_database
from .output import add_json_flag, emit, positive_int

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
    calls = commands.add_parser("calls", help="tool calls, oldest first, with filters")
    calls.add_argument("--run", dest="run_id", metavar="RUN")
    calls.add_argument("--tool", metavar="TOOL")
    calls.add_argument("--status", choices=[s.value for s in CallStatus])
    calls.add_argument("--since", type=_when, metavar="ISO", help="started at or after")
    calls.add_argument("--until", type=_when, metavar="ISO", help="started before")
    calls.add_argument("--approved-by", metavar="WHO")
    calls.add_argument("--limit", type=positive_int, default=1000)
    formats = calls.add_mutually_exclusive_group()
    formats.add_argument("--json", action="store_true", help="print JSON for machines")
    formats.add_argument("--csv", action="store_true", help="print CSV for spreadsheets")
    calls.set_defaults(run=lambda a: asyncio.run(_calls(a)))

    show = commands.add_parser("show", help="the whole story of one call")
    show.add_argument("run_id", metavar="RUN")
    show.add_argument("call_id", metavar="CALL")
    show.add_argument(
        "--reveal",
        action="store_true",
        help="decrypt the arguments and the result (recorded in the journal)",
    )
    show.add_argument("--by", metavar="WHO", help="who reveals (with --reveal; default: you)")
    add_json_flag(show)
    show.set_defaults(run=lambda a: asyncio.run(_show(a)))

    export = commands.add_parser(
        "export", help="journal events in the global order, one JSON object per line"
    )
    export.add_argument("--format", choices=["jsonl"], default="jsonl")
    export.add_argument(
        "--after", type=int, default=0, metavar="POSITION", help="resume after this event"
    )
    export.set_defaults(run=lambda a: asyncio.run(_export(a)))

    resolve = commands.add_parser("resolve", help="settle an outcome_unknown call")
    resolve.add_argument("run_id", metavar="RUN")
    resolve.add_argument("call_id", metavar="CALL")
    verdict = resolve.add_mutually_exclusive_group(required=True)
    verdict.add_argument("--succeeded", action="store_true", help="it did take effect")
    verdict.add_argument("--failed", action="store_true", help="it did not take effect")
    resolve.add_argument("--by", required=True, metavar="WHO")
    resolve.add_argument("--note", help="what was checked")
    add_json_flag(resolve)
    resolve.set_defaults(run=lambda a: asyncio.run(_resolve(a)))


def _row(call: CallRecord, approved_by: str | None) -> dict[str, Any]:
    return {
        "run_id": call.run_id,
        "call_id": call.call_id,
        "tool": call.tool,
        "effect": call.effect.value,
        "status": call.status.value,
        "attempts": call.attempts,
        "approval_id": call.approval_id,
        "approved_by": approved_by,
        "args_digest": call.args_digest,
        "result_digest": call.result_digest,
        "resolved_by": call.resolved_by,
        "started_at": call.started_at.isoformat(),
        "finished_at": call.finished_at.isoformat() if call.finished_at else None,
    }


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
    async with open_database(args) as db:
        rows = [_row(call, by) for call, by in await find_calls(db, where)]
    if args.csv:
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        sys.stdout.write(out.getvalue())
        return 0
    lines = [f"{'RUN':<24} {'CALL':<20} {'TOOL':<16} {'STATUS':<16} {'APPROVED BY':<16} STARTED"]
    lines += [
        f"{r['run_id']:<24} {r['call_id']:<20} {r['tool']:<16} {r['status']:<16} "
        f"{r['approved_by'] or '-':<16} {r['started_at']}"
        for r in rows
    ]
    emit(args, "\n".join(lines), {"calls": rows})
    return 0


def _events(story_events: list[Any]) -> list[dict[str, Any]]:
    return [
        {
            "position": e.position,
            "version": e.version,
            "type": e.type,
            "actor": e.actor,
            "recorded_at": e.recorded_at.isoformat(),
            "data": e.data,
        }
        for e in story_events
    ]


async def _show(args: argparse.Namespace) -> int:
    async with open_database(args) as db:
        ring = await KeyRing.open(db, create_missing=False) if args.reveal else None
        revealer = (args.by or getpass.getuser()) if args.reveal else None
        story = await call_story(db, args.run_id, args.call_id, reveal_by=revealer, ring=ring)
    data: dict[str, Any] = {
        "call": _row(story.call, story.approved_by),
        "events": _events(story.events),
        "approval_events": _events(story.approval_events),
    }
    if args.reveal:
        data |= {"args": story.args, "result": story.result}
    emit(args, _story_text(story, args.reveal), data)
    return 0


def _story_text(story: CallStory, revealed: bool) -> str:
    call = story.call
    lines = [
        f"call {call.call_id} of run {call.run_id}: {call.tool} ({call.effect}), {call.status} "
        f"after {call.attempts} attempt(s)",
        f"  idempotency key {call.idempotency_key}; arguments {call.args_digest[:16]}…; "
        f"result {(call.result_digest or '-')[:16]}…",
    ]
    if call.approval_id:
        lines.append(f"  approval {call.approval_id}, approved by {story.approved_by or '-'}")
    for event in sorted([*story.approval_events, *story.events], key=lambda e: e.position):
        lines.append(f"  {event.recorded_at.isoformat()}  {event.type:<22} by {event.actor}")
    if revealed:
        lines.append(f"  arguments: {json.dumps(story.args)}")
        lines.append(f"  result: {json.dumps(story.result)}")
    return "\n".join(lines)


async def _export(args: argparse.Namespace) -> int:
    async with open_database(args) as db:
        async for exported in export_events(db, after=args.after):
            sys.stdout.write(json.dumps(exported.to_dict()) + "\n")
    return 0


async def _resolve(args: argparse.Namespace) -> int:
    async with open_database(args) as db:
        ledger = ToolLedger(db, await KeyRing.open(db, create_missing=False))
        record = await ledger.resolve(
            args.run_id, args.call_id, succeeded=args.succeeded, by=args.by, note=args.note
        )
        await ledger.close()
    text = f"call {record.call_id} of run {record.run_id} resolved as {record.status} by {args.by}"
    emit(args, text, _row(record, None))
    return 0
