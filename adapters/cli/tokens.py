"""`signoff tokens ...`: API tokens for reviewers and auditors of `signoff serve`, and for the
agents (MCP clients) of `signoff mcp`.

Making and revoking tokens is an administrator's (run with the owner's login); each one is
journaled on the token's stream `token:<id>`, never with its secret. A new token is printed
once: only its hash is stored.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import re
from datetime import timedelta
from typing import Any

from approvals import ApiTokens, Scope, TokenInfo
from approvals.credentials import MAX_LIFETIME

from .arguments import identifier, reviewer
from .context import open_database
from .output import add_json_flag, emit, safe

_EXAMPLES = """\
examples:
  signoff tokens create --reviewer alice                  a reviewer's token for 30 days
  signoff tokens create --reviewer audit-bot --scope auditor --expires 7d
  signoff tokens create --reviewer support-agent --scope agent   an MCP client's, for signoff mcp
  signoff tokens list
  signoff tokens revoke 3f2a9c0d1e4b5a69
"""

_LIFETIME = re.compile(r"([1-9][0-9]{0,5})([mhdw])")
_UNIT = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def lifetime(text: str) -> timedelta:
    """`30d`, `12h`, `90m`, `2w`: how long a token is valid (at most `MAX_LIFETIME`)."""
    match = _LIFETIME.fullmatch(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(
            f"{safe(text)!r} is no lifetime: a whole number and m, h, d or w (30d, 12h)"
        )
    value = timedelta(**{_UNIT[match.group(2)]: int(match.group(1))})
    if value > MAX_LIFETIME:
        raise argparse.ArgumentTypeError(f"at most {MAX_LIFETIME.days} days")
    return value


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tokens = groups.add_parser(
        "tokens",
        help="API tokens for `signoff serve` (reviewers, auditors) and `signoff mcp` (agents)",
        description="API tokens authenticate reviewers and auditors to `signoff serve`, and "
        "agents (MCP clients) to `signoff mcp`, which `signoff serve` refuses. A token "
        "is printed once when it is made; the database keeps only its hash. Making and "
        "revoking tokens needs the owner's login and is journaled.",
        epilog=_EXAMPLES,
    )
    commands = tokens.add_subparsers(
        dest="command", required=True, metavar="COMMAND", help="what to do"
    )

    create = commands.add_parser(
        "create",
        help="make a token for a reviewer, an auditor or an agent (printed once)",
        description="Make a token for a reviewer id (or, with --scope agent, an agent's "
        "principal name) and print it, once. The reviewer's groups come from the reviewer "
        "directory when the token is used, never from the token; an agent has none.",
    )
    create.add_argument(
        "--reviewer",
        required=True,
        metavar="ID",
        type=reviewer,
        help="the reviewer's id, or the agent's principal name with --scope agent",
    )
    create.add_argument(
        "--scope",
        choices=[s.value for s in Scope],
        default=Scope.REVIEWER.value,
        help="reviewer: sees and decides what policies admit; auditor: reads only; "
        "agent: an MCP client of `signoff mcp`, refused by `signoff serve` (default: reviewer)",
    )
    create.add_argument(
        "--expires",
        type=lifetime,
        default=timedelta(days=30),
        metavar="LIFETIME",
        help="valid for this long: 90m, 12h, 30d, 2w (default 30d, at most 366d)",
    )
    _add_by(create)
    add_json_flag(create)
    create.set_defaults(run=lambda a: asyncio.run(_create(a)))

    listing = commands.add_parser("list", help="the tokens that authenticate (never secrets)")
    listing.add_argument("--all", action="store_true", help="revoked and expired ones too")
    add_json_flag(listing)
    listing.set_defaults(run=lambda a: asyncio.run(_list(a)))

    revoke = commands.add_parser("revoke", help="revoke a token (journals token.revoked)")
    revoke.add_argument("token_id", metavar="ID", type=identifier, help="the token's id")
    _add_by(revoke)
    add_json_flag(revoke)
    revoke.set_defaults(run=lambda a: asyncio.run(_revoke(a)))


def _add_by(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--by", metavar="WHO", type=identifier, help="who makes the change (default: you)"
    )


def _line(info: TokenInfo) -> str:
    state = (
        f"revoked {info.revoked_at.isoformat()}"
        if info.revoked_at is not None
        else f"expires {info.expires_at.isoformat()}"
    )
    used = "never used" if info.last_used_at is None else f"used {info.last_used_at.isoformat()}"
    return f"{info.token_id}  {safe(info.reviewer)} ({info.scope}), {state}, {used}"


async def _create(args: argparse.Namespace) -> int:
    async with open_database(args) as db:
        created = await ApiTokens(db).create(
            args.reviewer,
            scope=args.scope,
            expires_in=args.expires,
            by=args.by or getpass.getuser(),
        )
    data: dict[str, Any] = {"token": created.token, **created.info.to_json()}
    text = (
        f"{created.token}\n"
        f"token {created.info.token_id} for {safe(created.info.reviewer)} "
        f"({created.info.scope}), expires {created.info.expires_at.isoformat()}.\n"
        "This is the only time the token is shown: store it in a secret manager."
    )
    emit(args, text, data)
    return 0


async def _list(args: argparse.Namespace) -> int:
    async with open_database(args) as db:
        found = await ApiTokens(db).list(include_inactive=args.all)
    lines = [_line(i) for i in found] or ["no tokens"]
    emit(args, "\n".join(lines), {"tokens": [i.to_json() for i in found]})
    return 0


async def _revoke(args: argparse.Namespace) -> int:
    async with open_database(args) as db:
        info = await ApiTokens(db).revoke(args.token_id, by=args.by or getpass.getuser())
    emit(args, _line(info), info.to_json())
    return 0
