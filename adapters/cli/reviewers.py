"""`signoff reviewers ...`: the reviewer directory, where a reviewer's groups come from.

Changes are an administrator's (run with the owner's login) and each one is journaled in the
reviewer's stream `reviewer:<id>`.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
from typing import Any

from approvals import ReviewerDirectory, ReviewerEntry

from .arguments import identifier, reviewer, reviewer_group
from .context import open_database
from .output import add_json_flag, emit, safe

_EXAMPLES = """\
examples:
  signoff reviewers add alice --group support-leads --group finance
  signoff reviewers list
  signoff reviewers remove alice
"""


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    reviewers = groups.add_parser(
        "reviewers",
        help="the reviewer directory (who is in which group)",
        description="The reviewer directory: a policy's `group:<name>` matches only reviewers "
        "the directory puts in that group. Every change is journaled.",
        epilog=_EXAMPLES,
    )
    commands = reviewers.add_subparsers(
        dest="command", required=True, metavar="COMMAND", help="what to do"
    )

    add = commands.add_parser(
        "add",
        help="put a reviewer in the directory with exactly these groups",
        description="Put a reviewer in the directory with exactly the groups given (adding "
        "one already there sets its groups). Journals reviewer.added or "
        "reviewer.groups_changed; the same groups again record nothing.",
    )
    add.add_argument("reviewer_id", metavar="ID", type=reviewer, help="the reviewer's id")
    add.add_argument(
        "--group",
        action="append",
        default=[],
        metavar="G",
        type=reviewer_group,
        help="a group of the reviewer (repeatable)",
    )
    _add_by(add)
    add_json_flag(add)
    add.set_defaults(run=lambda a: asyncio.run(_add(a)))

    listing = commands.add_parser("list", help="the reviewers in the directory, by id")
    listing.add_argument("--all", action="store_true", help="removed reviewers too")
    add_json_flag(listing)
    listing.set_defaults(run=lambda a: asyncio.run(_list(a)))

    remove = commands.add_parser(
        "remove",
        help="take a reviewer out of the directory (journals reviewer.removed)",
    )
    remove.add_argument("reviewer_id", metavar="ID", type=reviewer, help="the reviewer's id")
    _add_by(remove)
    add_json_flag(remove)
    remove.set_defaults(run=lambda a: asyncio.run(_remove(a)))


def _add_by(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--by", metavar="WHO", type=identifier, help="who makes the change (default: you)"
    )


def _row(entry: ReviewerEntry) -> dict[str, Any]:
    return {
        "reviewer_id": entry.reviewer_id,
        "groups": list(entry.groups),
        "active": entry.active,
        "changed_by": entry.changed_by,
        "changed_at": entry.changed_at.isoformat(),
        "version": entry.version,
    }


def _line(entry: ReviewerEntry) -> str:
    groups = ", ".join(safe(g) for g in entry.groups) or "-"
    state = "" if entry.active else " (removed)"
    return f"{safe(entry.reviewer_id)}{state}: {groups}"


async def _add(args: argparse.Namespace) -> int:
    async with open_database(args) as db:
        entry = await ReviewerDirectory(db).add(
            args.reviewer_id, args.group, by=args.by or getpass.getuser()
        )
    emit(args, _line(entry), _row(entry))
    return 0


async def _list(args: argparse.Namespace) -> int:
    async with open_database(args) as db:
        entries = await ReviewerDirectory(db).list(include_removed=args.all)
    lines = [f"{'REVIEWER':<32} GROUPS"]
    lines += [
        f"{safe(e.reviewer_id) + ('' if e.active else ' (removed)'):<32} "
        + (", ".join(safe(g) for g in e.groups) or "-")
        for e in entries
    ]
    emit(args, "\n".join(lines), {"reviewers": [_row(e) for e in entries]})
    return 0


async def _remove(args: argparse.Namespace) -> int:
    async with open_database(args) as db:
        entry = await ReviewerDirectory(db).remove(
            args.reviewer_id, by=args.by or getpass.getuser()
        )
    emit(args, _line(entry), _row(entry))
    return 0
