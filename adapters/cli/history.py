"""`signoff db history [record | settle]`: losses of committed history (`ledger.store.history`).

While a loss is open no tool call starts; the owner's login records or settles one, an
auditor's reads them.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
from typing import Any

from ledger.store.history import HistoryLoss, losses, record_loss, settle_loss

from .context import open_database
from .output import add_json_flag, emit, safe

__all__ = ["register"]

_EXAMPLES = """\
examples:
  signoff db history                     every loss recorded; exit 1 while one is open
  signoff db history record --reason "digest of 03:00 no longer verifies after the failover"
  signoff db history settle --reason "lost calls c17-c42 checked against the payment log"
"""


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    history = commands.add_parser(
        "history",
        help="losses of committed history (a failover that lost commits): while one is open, "
        "no tool call starts",
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_json_flag(history)
    history.set_defaults(run=lambda a: asyncio.run(_list(a)))
    actions = history.add_subparsers(
        dest="action", metavar="ACTION", help="what to do (none: list the losses)"
    )
    for name, text in (
        (
            "record",
            "open a loss found another way (a digest that no longer verifies, a "
            "restore to an earlier time): no call starts until it is settled",
        ),
        ("settle", "settle the open loss once its lost calls are accounted for: calls start again"),
    ):
        action = actions.add_parser(name, help=text)
        action.add_argument(
            "--reason", required=True, metavar="TEXT", help="what was found, or decided"
        )
        add_json_flag(action)
        action.set_defaults(run=lambda a: asyncio.run(_change(a)))


def _described(loss: HistoryLoss) -> str:
    found = (
        f"loss {loss.loss_id}: found {loss.found_at.isoformat()} by {safe(loss.found_by)}"
        f" ({len(loss.missing)} events seen committed are missing)"
        if loss.missing
        else f"loss {loss.loss_id}: recorded {loss.found_at.isoformat()} by {safe(loss.found_by)}"
    )
    lines = [found, f"  reason: {safe(loss.reason)}"]
    if loss.settled_at is None:
        lines.append(
            "  OPEN: no tool call starts until it is settled (`signoff db history settle`)"
        )
    else:
        lines.append(
            f"  settled {loss.settled_at.isoformat()} by {safe(loss.settled_by or '')}: "
            f"{safe(loss.settlement or '')}"
        )
    return "\n".join(lines)


def _data(loss: HistoryLoss) -> dict[str, Any]:
    return {**dataclasses.asdict(loss), "missing": list(loss.missing), "open": loss.open}


async def _list(args: argparse.Namespace) -> int:
    async with open_database(args) as db:
        found = await losses(db)
    text = "\n".join(_described(loss) for loss in found) or "no loss of committed history"
    emit(args, text, {"losses": [_data(loss) for loss in found]})
    return 1 if any(loss.open for loss in found) else 0


async def _change(args: argparse.Namespace) -> int:
    async with open_database(args) as db:
        if args.action == "settle":
            loss, created = await settle_loss(db, args.reason), True
        else:
            loss, created = await record_loss(db, args.reason)
    text = _described(loss)
    if not created:
        text = f"{text}\nalready open: this reason was not recorded"
    emit(args, text, {**_data(loss), "recorded_now": created})
    return 0
