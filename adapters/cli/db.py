"""`signoff db ...`: schema migrations."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable

from alembic.util.exc import CommandError

from ledger import migrate
from ledger.config import masked, resolve_url
from ledger.db import open_raw_connection
from ledger.errors import ConfigurationError

from .output import add_json_flag, emit


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    db = groups.add_parser("db", help="database schema")
    commands = db.add_subparsers(dest="command", required=True, metavar="COMMAND")

    upgrade = commands.add_parser("upgrade", help="migrate the schema up (to head by default)")
    upgrade.add_argument("revision", nargs="?", default="head")
    add_json_flag(upgrade)
    upgrade.set_defaults(run=_upgrade)

    downgrade = commands.add_parser("downgrade", help="migrate the schema down")
    downgrade.add_argument("revision", nargs="?", default="-1", help="target (default: one step)")
    add_json_flag(downgrade)
    downgrade.set_defaults(run=_downgrade)

    current = commands.add_parser("current", help="show the schema revision")
    add_json_flag(current)
    current.set_defaults(run=_current)


def _upgrade(args: argparse.Namespace) -> int:
    url = resolve_url(args.database_url)
    _migrate(migrate.upgrade, url, args.revision)
    return _report(args, url, "upgraded")


def _downgrade(args: argparse.Namespace) -> int:
    url = resolve_url(args.database_url)
    _migrate(migrate.downgrade, url, args.revision)
    return _report(args, url, "downgraded")


def _migrate(step: Callable[[str, str], None], url: str, revision: str) -> None:
    try:
        step(url, revision)
    except CommandError as e:  # an unknown revision and the like
        raise ConfigurationError(f"cannot migrate to {revision!r}: {e}") from e


def _current(args: argparse.Namespace) -> int:
    return _report(args, resolve_url(args.database_url), "at")


def _report(args: argparse.Namespace, url: str, verb: str) -> int:
    revision = asyncio.run(_revision(url))
    head = migrate.head_revision()
    emit(
        args,
        f"{masked(url)}: {verb} revision {revision or 'base (empty)'} (head is {head})",
        {"database": masked(url), "revision": revision, "head": head},
    )
    return 0


async def _revision(url: str) -> str | None:
    conn = await open_raw_connection(url)
    try:
        if not await conn.fetchval("SELECT to_regclass('alembic_version') IS NOT NULL"):
            return None
        revision: str | None = await conn.fetchval("SELECT version_num FROM alembic_version")
        return revision
    finally:
        await conn.close()
