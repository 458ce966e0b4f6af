"""`signoff serve`: the reviewer and auditor HTTP service (the `serve` extra).

The web framework lives in `adapters.http`, imported only when the command runs, so the rest of
the CLI works without the extra.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import TYPE_CHECKING

from adapters.extras import SERVE, require_extra

from .arguments import positive_int, reviewer
from .context import settings_of
from .output import safe
from .reviewer_kek import with_reviewer_kek

if TYPE_CHECKING:
    from adapters.http.server import Started

_EXAMPLES = """\
examples:
  signoff serve                                 on 127.0.0.1:8600, API tokens
  signoff serve --host 0.0.0.0 --port 8080      behind a reverse proxy that terminates TLS
  signoff serve --dev --dev-reviewer alice      development: a one-time token for alice

The service's login needs the role signoff_reviewer, and the reviewer side's KEK: it signs
decisions. That is SIGNOFF_REVIEWER_KEK (or _FILE), else the file signoff demo keeps for the
database's decision key (reviewer-keks/<KEK id> beside the embedded server's folder). It
refuses to start with no active API token and no OIDC configuration (SIGNOFF_OIDC_ISSUER,
_AUDIENCE, _JWKS) unless --dev.
"""


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = groups.add_parser(
        "serve",
        help="the HTTP API for reviewers and auditors",
        description="Serve the authenticated HTTP API (/v1, OpenAPI at /v1/openapi.json) for "
        "reviewers and auditors. Callers authenticate with API tokens (signoff tokens create) "
        "or, when SIGNOFF_OIDC_* is set, OIDC / JWT bearer tokens.",
        epilog=_EXAMPLES,
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    serve.add_argument(
        "--port", type=_port, default=8600, help="port to listen on (8600; 0: any free one)"
    )
    serve.add_argument(
        "--dev",
        action="store_true",
        help="development mode, loopback only: a one-time token held in memory, printed on "
        "stderr, for --dev-reviewer",
    )
    serve.add_argument(
        "--dev-reviewer",
        metavar="ID",
        type=reviewer,
        default="dev",
        help="the reviewer the --dev token stands for (default: dev)",
    )
    serve.add_argument(
        "--json",
        action="store_true",
        help="once listening, print where (url, login, tokens, OIDC issuer; the --dev token) "
        "as one JSON line on stdout",
    )
    serve.set_defaults(run=_run)


def _port(text: str) -> int:
    value = 0 if text.strip() == "0" else positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{value} is no port (0 to 65535)")
    return value


def _announce(started: Started, as_json: bool) -> None:
    if as_json:  # for programs that start the service and need its port
        document = {
            "url": started.url,
            "login": started.login,
            "active_tokens": started.active_tokens,
            "oidc_issuer": started.oidc_issuer,
            "dev_reviewer": started.dev_reviewer,
            "dev_token": started.dev_token,
        }
        print(json.dumps(document), flush=True)
    lines = [
        f"signoff serve: listening on {started.url} (API under /v1, OpenAPI at "
        f"{started.url}/v1/openapi.json, the inbox at {started.url}/inbox); "
        f"database login {safe(started.login)}, "
        f"{started.active_tokens} active API token(s)"
        + ("" if started.oidc_issuer is None else f", OIDC tokens of {safe(started.oidc_issuer)}")
    ]
    if started.dev_token is not None:
        lines += [
            "",
            "!" * 78,
            "!! DEVELOPMENT MODE: not for production. One token, held in this process's memory,",
            f"!! authenticates as reviewer {safe(started.dev_reviewer)}. It is gone when the",
            "!! server stops. Use it as: Authorization: Bearer <token>",
            f"!!   {started.dev_token}",
            f"!! The inbox, signed in: {started.url}/inbox#token={started.dev_token}",
            "!" * 78,
        ]
    print("\n".join(lines), file=sys.stderr, flush=True)


def _run(args: argparse.Namespace) -> int:
    require_extra("signoff serve", "serve", SERVE)
    from adapters.http.server import serve  # the web framework: only when serving

    async def run() -> None:
        # The reviewer KEK: configured, else the one `signoff demo` keeps for this database.
        settings = await with_reviewer_kek(settings_of(args))
        await serve(
            settings,
            host=args.host,
            port=args.port,
            dev_reviewer=args.dev_reviewer if args.dev else None,
            on_started=lambda started: _announce(started, args.json),
        )

    asyncio.run(run())
    return 0
