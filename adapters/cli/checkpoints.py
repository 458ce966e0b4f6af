"""`signoff checkpoints ...`: encrypted LangGraph checkpoints and their keys."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from adapters.extras import LANGGRAPH, require_extra
from ledger.keys import KeyRing, Purpose

from .arguments import positive_int
from .context import open_database
from .output import add_json_flag, emit, safe
from .progress import progress_bar, shows_progress

_REENCRYPT_EXAMPLES = """\
examples:
  signoff keys rotate checkpoint && signoff checkpoints reencrypt
  signoff checkpoints reencrypt --include-plaintext      after moving from a plain saver
"""


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    checkpoints = groups.add_parser("checkpoints", help="encrypted LangGraph checkpoints")
    commands = checkpoints.add_subparsers(
        dest="command", required=True, metavar="COMMAND", help="what to do"
    )

    reencrypt = commands.add_parser(
        "reencrypt",
        help="move every checkpoint row to the active checkpoint key",
        description="Move every checkpoint row to the active checkpoint key while workers keep "
        "running; exit 1 if rows are left under old keys.",
        epilog=_REENCRYPT_EXAMPLES,
    )
    reencrypt.add_argument(
        "--batch-size", type=positive_int, default=500, help="rows per transaction (default 500)"
    )
    reencrypt.add_argument(
        "--include-plaintext",
        action="store_true",
        help="also encrypt rows written by a plain (unencrypted) saver",
    )
    add_json_flag(reencrypt)
    reencrypt.set_defaults(run=lambda a: asyncio.run(_reencrypt(a)))

    status = commands.add_parser("status", help="checkpoint rows per key id")
    add_json_flag(status)
    status.set_defaults(run=lambda a: asyncio.run(_status(a)))


def _usage_rows(rows: dict[str, dict[str | None, int]]) -> dict[str, dict[str, int]]:
    return {
        table: {kid or "plaintext": n for kid, n in sorted(keys.items(), key=lambda i: i[0] or "")}
        for table, keys in rows.items()
    }


async def _reencrypt(args: argparse.Namespace) -> int:
    # Imported here: LangGraph takes a while to import, and only these commands need it.
    require_extra("signoff checkpoints", "langgraph", LANGGRAPH)
    from adapters.langgraph import encrypted_checkpointer, key_usage, reencrypt_checkpoints

    async with open_database(args) as db:
        ring = await KeyRing.open(db)
        async with encrypted_checkpointer(db, ring, max_size=2) as saver:
            total = None
            if shows_progress(args):
                active = ring.active_key_id(Purpose.CHECKPOINT)
                usage = await key_usage(saver)
                total = usage.not_under(active, plaintext=args.include_plaintext)
            with progress_bar(args, "re-encrypting", total=total, unit="row") as advance:
                report = await reencrypt_checkpoints(
                    saver,
                    batch_size=args.batch_size,
                    include_plaintext=args.include_plaintext,
                    progress=advance,
                )
    plaintext = report.after.plaintext()
    lines = [f"re-encrypted checkpoint rows under {report.key_id} ({report.passes} passes):"]
    for table, counts in report.tables.items():
        lines.append(
            f"  {table:<18} {counts.converted} converted, {counts.skipped} skipped (changed "
            f"meanwhile, retried), {counts.failed} failed"
        )
    lines += [f"  failed: {safe(failure)}" for failure in report.failures]
    if report.left:
        lines.append(f"{report.left} rows are still under other keys; run it again")
    else:
        lines.append("no row is left under an old key")
    if plaintext:
        hint = "" if args.include_plaintext else " (add --include-plaintext to encrypt them)"
        lines.append(f"{plaintext} plaintext rows{hint}")
    data: dict[str, Any] = {
        "key_id": report.key_id,
        "passes": report.passes,
        "tables": {t: vars(c) for t, c in report.tables.items()},
        "failures": report.failures,
        "left": report.left,
        "plaintext": plaintext,
        "usage": _usage_rows(report.after.rows),
    }
    emit(args, "\n".join(lines), data)
    unfinished = report.left or report.failures or (args.include_plaintext and plaintext)
    return 1 if unfinished else 0


async def _status(args: argparse.Namespace) -> int:
    require_extra("signoff checkpoints", "langgraph", LANGGRAPH)
    from adapters.langgraph import encrypted_checkpointer, key_usage

    async with open_database(args) as db:
        ring = await KeyRing.open(db)
        active = ring.active_key_id(Purpose.CHECKPOINT)
        states = {k.key_id: k.state.value for k in ring.all_keys()}
        async with encrypted_checkpointer(db, ring, max_size=1) as saver:
            usage = await key_usage(saver)
    rows = _usage_rows(usage.rows)
    lines = [f"{'TABLE':<18} {'KEY':<22} {'STATE':<13} ROWS"]
    for table, keys in rows.items():
        for kid, n in keys.items():
            state = "-" if kid == "plaintext" else states.get(kid, "unknown")
            lines.append(f"{safe(table):<18} {safe(kid):<22} {state:<13} {n}")
    old = usage.not_under(active, plaintext=False)
    lines.append(f"active checkpoint key {active}; {old} rows under older keys")
    data = {
        "active_key_id": active,
        "usage": rows,
        "old_key_rows": old,
        "plaintext": usage.plaintext(),
    }
    emit(args, "\n".join(lines), data)
    return 0
