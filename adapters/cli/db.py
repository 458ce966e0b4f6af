"""`signoff db ...`: schema migrations, and losses of committed history (`.history`).

Each migration command first refuses a pooler that hands server sessions between clients, as
every other command does (`schema_revision`), unless the settings turn that check off.
"""

from __future__ import annotations

import argparse
import asyncio

from ledger.store import migrate
from ledger.store.config import masked
from ledger.store.migrating import migrate_database, schema_revision, steps_between

from . import history
from .arguments import identifier
from .context import settings_of
from .output import add_json_flag, emit
from .progress import progress_bar, shows_progress

_UPGRADE_EXAMPLES = """\
examples:
  signoff db upgrade                 to the newest schema (run it after every upgrade of signoff)
  signoff db upgrade 0003            to a given revision
  signoff db upgrade --database-url postgresql://app@db.internal/signoff --json
"""


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    db = groups.add_parser("db", help="database schema", description="Schema migrations.")
    commands = db.add_subparsers(
        dest="command", required=True, metavar="COMMAND", help="what to do"
    )

    upgrade = commands.add_parser(
        "upgrade",
        help="migrate the schema up (to head by default)",
        description="Migrate the schema up. Concurrent upgrades take turns; a failed step leaves "
        "the revision where it was.",
        epilog=_UPGRADE_EXAMPLES,
    )
    upgrade.add_argument(
        "revision", nargs="?", default="head", type=identifier, help="target (default: head)"
    )
    add_json_flag(upgrade)
    upgrade.set_defaults(run=_upgrade)

    downgrade = commands.add_parser(
        "downgrade",
        help="migrate the schema down",
        epilog="examples:\n  signoff db downgrade          one step down\n"
        "  signoff db downgrade base     remove every Signoff table (and its data)\n",
    )
    downgrade.add_argument(
        "revision",
        nargs="?",
        default="-1",
        type=identifier,
        help="target: a revision, base, or -N steps (default: -1)",
    )
    add_json_flag(downgrade)
    downgrade.set_defaults(run=_downgrade)

    current = commands.add_parser("current", help="show the schema revision")
    add_json_flag(current)
    current.set_defaults(run=_current)

    history.register(commands)


def _upgrade(args: argparse.Namespace) -> int:
    return _migrate(args, down=False)


def _downgrade(args: argparse.Namespace) -> int:
    return _migrate(args, down=True)


def _migrate(args: argparse.Namespace, *, down: bool) -> int:
    settings = settings_of(args)
    url = settings.resolve_url()
    total = None
    if shows_progress(args):
        current = asyncio.run(schema_revision(url, settings=settings))
        total = steps_between(current, args.revision, down=down)
    verb = "downgrading" if down else "upgrading"
    with progress_bar(args, f"{verb} schema", total=total, unit="step") as advance:
        migrate_database(
            url, args.revision, down=down, on_step=lambda: advance(1), settings=settings
        )
    return _report(args, url, "downgraded" if down else "upgraded")


def _current(args: argparse.Namespace) -> int:
    return _report(args, settings_of(args).resolve_url(), "at")


def _report(args: argparse.Namespace, url: str, verb: str) -> int:
    revision = asyncio.run(schema_revision(url, settings=settings_of(args)))
    head = migrate.head_revision()
    emit(
        args,
        f"{masked(url)}: {verb} revision {revision or 'base (empty)'} (head is {head})",
        {"database": masked(url), "revision": revision, "head": head},
    )
    return 0
