"""`signoff policy ...`: the Cedar policy sets that allow, deny or require approval per call.

Publishing is a policy administrator's (a reviewer of the directory group `policy-admins`) on
the reviewer side: the set is signed with the decision key, so it needs the reviewer-side KEK.
Reading a set, the schema and testing a call need only a login that reads `policy_sets`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from approvals.policies import (
    CallFacts,
    Mode,
    PolicyPoint,
    PolicySets,
    Principal,
    PublishedSet,
)
from approvals.policies.schema import cedar_schema
from ledger.errors import ConfigurationError
from ledger.keys import KeyRing

from .arguments import identifier, json_object, positive_int, reviewer, reviewer_group
from .context import open_database
from .output import add_json_flag, emit, safe
from .reviewer_kek import signing_ring

_EXAMPLES = """\
examples:
  signoff policy schema > schema.json          # what policies can read, per registered tool
  signoff policy publish refunds.cedar --by carol
  signoff policy publish refunds.cedar --by carol --mode log_only --timezone Europe/Berlin
  signoff policy test --tool refund --args '{"amount": 80}' --principal agent-7 --run R
  signoff policy show
  signoff policy publish --mode off --by carol  # back to the tools' own rules
"""


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    policy = groups.add_parser(
        "policy",
        help="Cedar policy sets: allow, deny or require approval per call",
        description="Cedar policy sets decide every tool call: allow, deny or require an "
        "approval. Each published set is a new version, signed and journaled; the highest is "
        "active.",
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = policy.add_subparsers(
        dest="command", required=True, metavar="COMMAND", help="what to do"
    )

    publish = commands.add_parser(
        "publish",
        help="publish a policy set as the next version (a policy administrator)",
        description="Validate a Cedar policy set against the schema of the registered tools "
        "and publish it as the next version, signed for the administrator (a reviewer of the "
        "directory group policy-admins; needs the reviewer-side KEK). An invalid set is "
        "refused with Cedar's diagnostics and nothing changes.",
    )
    publish.add_argument(
        "file", nargs="?", type=Path, help="the Cedar policies ('-': standard input)"
    )
    publish.add_argument(
        "--mode",
        choices=[str(m) for m in Mode],
        default=str(Mode.ENFORCE),
        help="enforce: the set decides; log_only: recorded beside the calls while the tools' "
        "own rules decide; off: the tools' own rules decide (no FILE)",
    )
    publish.add_argument(
        "--timezone", default="UTC", metavar="ZONE", help="the zone of context.now (IANA name)"
    )
    publish.add_argument(
        "--expect-version",
        type=positive_int,
        metavar="N",
        help="refuse unless version N is the active one (no publish in between)",
    )
    publish.add_argument(
        "--by", required=True, metavar="ADMIN", type=reviewer, help="the administrator's id"
    )
    add_json_flag(publish)
    publish.set_defaults(run=lambda a: asyncio.run(_publish(a)))

    show = commands.add_parser("show", help="a published set (default: the active one)")
    show.add_argument("--version", type=positive_int, metavar="N", help="that version")
    add_json_flag(show)
    show.set_defaults(run=lambda a: asyncio.run(_show(a)))

    listing = commands.add_parser("list", help="every published version")
    add_json_flag(listing)
    listing.set_defaults(run=lambda a: asyncio.run(_list(a)))

    schema = commands.add_parser(
        "schema", help="the Cedar schema (JSON) sets are validated against, from the tools"
    )
    add_json_flag(schema)  # JSON either way
    schema.set_defaults(run=lambda a: asyncio.run(_schema(a)))

    test = commands.add_parser(
        "test",
        help="what the active set decides of a call, and why (records nothing)",
        description="Judge one call with the active set, the run's history as the ledger has "
        "it and the time now; prints the outcome, the determining policies and the reason. "
        "Nothing is recorded.",
    )
    test.add_argument("--tool", required=True, type=identifier, help="the tool's name")
    test.add_argument(
        "--args", required=True, type=json_object, metavar="JSON", help="its arguments"
    )
    test.add_argument("--principal", required=True, type=identifier, help="who asks")
    test.add_argument(
        "--group",
        action="append",
        default=[],
        type=reviewer_group,
        metavar="G",
        help="a group of the principal (repeatable)",
    )
    test.add_argument(
        "--run", dest="run_id", required=True, type=identifier, help="the run it belongs to"
    )
    add_json_flag(test)
    test.set_defaults(run=lambda a: asyncio.run(_test(a)))


def _row(published: PublishedSet) -> dict[str, Any]:
    return published.to_json()


def _summary(published: PublishedSet) -> str:
    ids = ", ".join(safe(i) for i in published.policy_ids) or "-"
    return (
        f"version {published.version} ({published.mode.value}) {published.set_hash}\n"
        f"published by {safe(published.published_by)} at {published.published_at.isoformat()}"
        f", zone {published.timezone}\npolicies: {ids}"
    )


def _text(path: Path | None, mode: Mode) -> str:
    if mode is Mode.OFF:
        if path is not None:
            raise ConfigurationError("a set of mode off has no policies: give no FILE")
        return ""
    if path is None:
        raise ConfigurationError("give the Cedar policies: a FILE, or '-' for standard input")
    if str(path) == "-":
        return sys.stdin.read()
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigurationError(f"cannot read {path}: {e}") from None


async def _publish(args: argparse.Namespace) -> int:
    mode = Mode(args.mode)
    text = _text(args.file, mode)  # before touching the database
    async with open_database(args) as db:
        ring = await signing_ring(db)
        published = await PolicySets(db, ring).publish(
            text,
            by=args.by,
            mode=mode,
            timezone=args.timezone,
            expect_version=args.expect_version,
        )
    emit(args, _summary(published), _row(published))
    return 0


async def _sets(db: Any) -> PolicySets:
    return PolicySets(db, await KeyRing.open(db, create_missing=False))


async def _show(args: argparse.Namespace) -> int:
    async with open_database(args) as db:
        sets = await _sets(db)
        version = args.version or await sets.head()
        if version == 0:
            emit(args, "no policy set is published: the tools' own rules decide", {})
            return 0
        published = await sets.get(version)
    emit(args, _summary(published) + "\n\n" + published.policies, _row(published))
    return 0


async def _list(args: argparse.Namespace) -> int:
    async with open_database(args) as db:
        published = await (await _sets(db)).list()
    lines = [f"{'VERSION':<8} {'MODE':<9} {'BY':<20} PUBLISHED"]
    lines += [
        f"{p.version:<8} {p.mode.value:<9} {safe(p.published_by):<20} {p.published_at.isoformat()}"
        for p in published
    ]
    emit(args, "\n".join(lines), {"policy_sets": [_row(p) for p in published]})
    return 0


async def _schema(args: argparse.Namespace) -> int:
    async with open_database(args) as db:
        tools = await (await _sets(db)).registered()
    schema = cedar_schema(tools)
    emit(args, json.dumps(schema, indent=2, sort_keys=True), schema)
    return 0


async def _test(args: argparse.Namespace) -> int:
    async with open_database(args) as db:
        point = PolicyPoint(await _sets(db))
        try:
            facts = CallFacts(
                args.run_id,
                "policy-test",
                args.tool,
                args.args,
                Principal(args.principal, frozenset(args.group)),
            )
            verdict = await point.judge(facts, None)
        finally:
            await point.close()
    stamp = verdict.stamp
    if stamp is None:
        shown = "no policy set is active: the tool's own rule decides"
        emit(args, shown, {"outcome": None, "reason": shown})
        return 0
    document: dict[str, Any] = stamp.to_json()
    if verdict.approval is not None:
        document["approval"] = verdict.approval.to_json()
    lines = [
        f"{stamp.outcome.value} (version {stamp.version}, {stamp.mode.value})",
        f"policies: {', '.join(safe(p) for p in stamp.policies) or '-'}",
        f"why: {safe(stamp.reason)}",
    ]
    if verdict.approval is not None:
        approvers = ", ".join(sorted(verdict.approval.approvers)) or "any listed reviewer"
        lines.append(f"approval: {approvers}, quorum {verdict.approval.quorum}")
    emit(args, "\n".join(lines), document)
    return 0
