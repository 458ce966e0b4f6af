"""`signoff mcp`: the MCP gateway in front of upstream MCP servers."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import sys

from adapters.extras import MCP, require_extra
from approvals.identity import reviewer_id
from ledger.calls.service import DEFAULT_LEASE_SECONDS
from ledger.errors import ConfigurationError

from .arguments import reviewer
from .context import settings_of

_EXAMPLES = """\
examples:
  signoff mcp --config signoff-mcp.toml                      stdio, for a local client's config
  signoff mcp --config signoff-mcp.toml --principal alice    stdio, calls made as alice
  signoff mcp --config signoff-mcp.toml --http 0.0.0.0:8700  shared, clients send agent tokens
"""


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    mcp = groups.add_parser(
        "mcp",
        help="the MCP gateway: approvals and the ledger for any MCP client's tool calls",
        description="Serve the tools of the upstream MCP servers a config file names, each call "
        "through Signoff's approvals and once-per-run ledger. Over stdio the caller is "
        "--principal; over HTTP (--http) every client sends an agent token "
        "(signoff tokens create --scope agent) or an OIDC bearer token.",
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    mcp.add_argument("--config", required=True, metavar="FILE", help="the gateway's TOML file")
    mcp.add_argument(
        "--http",
        metavar="[HOST:]PORT",
        type=_listen,
        help="serve Streamable HTTP at http://HOST:PORT/mcp (host 127.0.0.1 by default; port 0: "
        "any free one) instead of stdio",
    )
    mcp.add_argument(
        "--principal",
        type=reviewer,
        help="who calls over stdio (default: this OS user's name)",
    )
    mcp.add_argument("--public-url", metavar="URL", help="the inbox's URL (over the config's)")
    mcp.add_argument(
        "--lease-seconds",
        type=float,
        default=DEFAULT_LEASE_SECONDS,
        metavar="S",
        help="how long a running call is held without a beat from this gateway before another "
        f"takes it over or records outcome_unknown (default {DEFAULT_LEASE_SECONDS:g})",
    )
    mcp.add_argument(
        "--json",
        action="store_true",
        help='with --http: once listening, print {"url": ...} as one JSON line on stdout',
    )
    mcp.set_defaults(run=_run)


def _listen(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"not [HOST:]PORT: {text!r}")
    return (host.strip("[]") or "127.0.0.1"), int(port)


def _run(args: argparse.Namespace) -> int:
    require_extra("signoff mcp", "mcp", MCP)
    from adapters.mcp.config import load_config
    from adapters.mcp.running import Listen, run_gateway

    if args.http is not None and args.principal is not None:
        raise ConfigurationError(
            "--principal is for stdio: over --http a bearer token names each caller"
        )
    if args.http is None and args.json:
        raise ConfigurationError("--json goes with --http (it prints where the gateway listens)")
    settings = settings_of(args)
    config = load_config(
        args.config, public_url=args.public_url, default_public_url=settings.public_url
    )
    listen = None if args.http is None else Listen(*args.http)
    principal = args.principal or reviewer_id(getpass.getuser())

    def announce(url: str) -> None:
        if args.json:
            print(json.dumps({"url": url}), flush=True)
        else:
            print(f"signoff mcp listening on {url}", file=sys.stderr, flush=True)

    asyncio.run(
        run_gateway(
            settings,
            config,
            principal=principal,
            listen=listen,
            lease_seconds=args.lease_seconds,
            on_started=announce,
        )
    )
    return 0
