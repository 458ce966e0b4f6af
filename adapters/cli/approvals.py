"""`signoff approvals ...`: list, show, decide and cancel approval requests from any shell."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
from typing import Any

from adapters.runtime.documents import approval_json
from approvals import (
    Approval,
    ApprovalStatus,
    ApprovalStore,
    Decision,
    InvalidApprovalRequest,
)
from ledger.audit.reveals import record_reveal
from ledger.keys import KeyRing
from ledger.store import Database

from .arguments import identifier, json_object, positive_int, reviewer, text
from .context import open_database
from .output import add_json_flag, emit, safe
from .reviewer_kek import signing_ring

_DECIDE_EXAMPLES = """\
examples:
  signoff approvals decide apr-7d99...  --approve --by alice
  signoff approvals decide apr-7d99...  --reject --reason "wrong order" --by alice
  signoff approvals decide apr-7d99...  --edit '{"order_id": "A-1", "amount": 20}' --by alice
  signoff approvals decide apr-7d99...  --respond "refunds over 100 need a manager" --by alice
"""

_CANCEL_EXAMPLES = """\
examples:
  signoff approvals list --status pending
  signoff approvals cancel apr-7d99...  --by alice --reason "asked twice"
"""


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    approvals = groups.add_parser(
        "approvals", help="list, show, decide and cancel approval requests"
    )
    commands = approvals.add_subparsers(
        dest="command", required=True, metavar="COMMAND", help="what to do"
    )

    listing = commands.add_parser("list", help="list approval requests, oldest first")
    listing.add_argument(
        "--status", choices=[s.value for s in ApprovalStatus], help="only this status"
    )
    listing.add_argument(
        "--run", dest="run_id", metavar="RUN", type=identifier, help="only this run id"
    )
    listing.add_argument(
        "--limit", type=positive_int, default=100, help="at most this many (default 100)"
    )
    add_json_flag(listing)
    listing.set_defaults(run=lambda a: asyncio.run(_list(a)))

    show = commands.add_parser("show", help="one approval request and its reviews")
    show.add_argument("approval_id", type=identifier, help="the approval's id")
    show.add_argument(
        "--reveal",
        action="store_true",
        help="decrypt the arguments (sensitive fields too), what led to the call and the "
        "decision (recorded)",
    )
    show.add_argument(
        "--by", metavar="WHO", type=identifier, help="who reveals (with --reveal; default: you)"
    )
    add_json_flag(show)
    show.set_defaults(run=lambda a: asyncio.run(_show(a)))

    decide = commands.add_parser(
        "decide",
        help="record a reviewer's decision",
        description="Record one reviewer's decision, signed with the decision key (this needs "
        "the reviewer-side KEK: SIGNOFF_REVIEWER_KEK_FILE, else the file signoff demo keeps for "
        "the database). The approval's policy says who may "
        "decide and how many approvals it needs; a decision that breaks it records nothing. The "
        "reviewer's groups come from the reviewer directory (`signoff reviewers`).",
        epilog=_DECIDE_EXAMPLES,
    )
    decide.add_argument("approval_id", type=identifier, help="the approval's id")
    kind = decide.add_mutually_exclusive_group(required=True)
    kind.add_argument("--approve", action="store_true", help="run the call as requested")
    kind.add_argument("--reject", action="store_true", help="do not run it (see --reason)")
    kind.add_argument(
        "--edit",
        metavar="JSON",
        type=json_object,
        help="run it with these arguments (a JSON object)",
    )
    kind.add_argument(
        "--respond", metavar="TEXT", type=text, help="answer instead of running the tool"
    )
    decide.add_argument("--reason", type=text, help="why it was rejected (with --reject)")
    decide.add_argument(
        "--by", required=True, metavar="REVIEWER", type=reviewer, help="the reviewer's id"
    )
    # Groups claimed by whoever decides would let anyone decide for any group.
    decide.add_argument("--group", action=_NoGroups, help=argparse.SUPPRESS)
    add_json_flag(decide)
    decide.set_defaults(run=lambda a: asyncio.run(_decide(a)))

    cancel = commands.add_parser(
        "cancel",
        help="withdraw a pending approval request (it will never run)",
        description="Withdraw a pending approval request: it becomes cancelled and its call "
        "never runs. The cancellation is recorded in the reviewer's name and signed with the "
        "decision key, so this needs the reviewer-side KEK (SIGNOFF_REVIEWER_KEK_FILE, else the "
        "file signoff demo keeps for the database). A request already decided, expired or "
        "cancelled is refused.",
        epilog=_CANCEL_EXAMPLES,
    )
    cancel.add_argument("approval_id", type=identifier, help="the approval's id")
    cancel.add_argument(
        "--by", required=True, metavar="REVIEWER", type=reviewer, help="who withdraws it"
    )
    cancel.add_argument("--reason", type=text, help="why (sealed; the waiting agent is told it)")
    add_json_flag(cancel)
    cancel.set_defaults(run=lambda a: asyncio.run(_cancel(a)))


class _NoGroups(argparse.Action):
    def __call__(self, parser: argparse.ArgumentParser, *_: Any, **__: Any) -> None:
        parser.error(
            "--group is refused: a reviewer's groups come from the reviewer directory "
            "(signoff reviewers add ID --group G)"
        )


def _no_keys(db: Database) -> KeyRing:
    """A key ring that loads nothing: listing and showing (without --reveal) decrypt nothing,
    so they work without the KEK."""
    return KeyRing(db, None)


def _row(approval: Approval) -> dict[str, Any]:
    row = approval_json(approval)
    if approval.args is not None:
        row["args"] = approval.args
    if approval.context is not None:
        row["context"] = approval.context.to_json()
    if approval.decision is not None:
        d = approval.decision
        row["decision"] = {
            "kind": d.kind.value,
            "reason": d.reason,
            "args": d.args,
            "message": d.message,
        }
    return row


def _shows_sensitive(approval: Approval) -> bool:
    """Whether a reveal of `approval` shows fields its policy marks sensitive (the CLI shows
    every field)."""
    decision = approval.decision
    shown = {*(approval.args or {}), *((decision.args or {}) if decision else {})}
    return bool(approval.policy.sensitive & shown)


def _parse_decision(args: argparse.Namespace) -> Decision:
    if args.reason is not None and not args.reject:
        raise InvalidApprovalRequest("--reason goes with --reject only")
    if args.approve:
        return Decision.approve()
    if args.reject:
        return Decision.reject(args.reason)
    if args.edit is not None:  # a JSON object already (`json_object`)
        return Decision.edit(args.edit)
    return Decision.respond(args.respond)


async def _list(args: argparse.Namespace) -> int:
    status = None if args.status is None else ApprovalStatus(args.status)
    async with open_database(args) as db:
        found = await ApprovalStore(db, _no_keys(db)).find(
            status=status, run_id=args.run_id, limit=args.limit
        )
    rows = [_row(a) for a in found]
    lines = [f"{'APPROVAL':<37} {'STATUS':<10} {'TOOL':<16} {'RUN':<20} REQUESTED"]
    lines += [
        f"{safe(r['approval_id']):<37} {r['status']:<10} {safe(r['tool']):<16} "
        f"{safe(r['run_id']):<20} {r['requested_at']}"
        for r in rows
    ]
    emit(args, "\n".join(lines), {"approvals": rows})
    return 0


async def _show(args: argparse.Namespace) -> int:
    async with open_database(args) as db:
        ring = await KeyRing.open(db, create_missing=False) if args.reveal else _no_keys(db)
        approval = await ApprovalStore(db, ring).get(args.approval_id, reveal=args.reveal)
        if args.reveal:  # who read the arguments in clear is part of the record
            who = args.by or getpass.getuser()
            await record_reveal(
                db,
                ring,
                f"reveal:{args.approval_id}",
                who,
                approval_id=args.approval_id,
                sensitive=_shows_sensitive(approval),
            )
    row = _row(approval)
    lines = [
        f"{k}: {json.dumps(v, default=str) if isinstance(v, (dict, list)) else safe(v)}"
        for k, v in row.items()
    ]
    emit(args, "\n".join(lines), row)
    return 0


async def _decide(args: argparse.Namespace) -> int:
    decision = _parse_decision(args)  # before touching the database: malformed records nothing
    async with open_database(args) as db:
        ring = await signing_ring(db)
        approval = await ApprovalStore(db, ring).decide(args.approval_id, decision, args.by)
    shown = f"{safe(approval.approval_id)}: {approval.status.value}"
    if approval.status is ApprovalStatus.PENDING:
        shown += " (more approvals needed)"
    emit(args, shown, _row(approval))
    return 0


async def _cancel(args: argparse.Namespace) -> int:
    async with open_database(args) as db:
        ring = await signing_ring(db)
        # It names a person: signed by the reviewer side, never a requester's bare withdrawal.
        ring.require_decision_signer()
        approval = await ApprovalStore(db, ring).cancel(
            args.approval_id, args.by, reason=args.reason
        )
    emit(args, f"{safe(approval.approval_id)}: {approval.status.value}", _row(approval))
    return 0
