"""`signoff embedded ...`: the PostgreSQL server Signoff runs itself when no database URL is set."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import Any

from ledger.store.embedded import SYSTEM_USER, EmbeddedStatus, server_status, stop_server

from .context import settings_of
from .output import add_json_flag, emit

_HOME = "$SIGNOFF_EMBEDDED_DIR, else /var/lib/signoff/embedded as root, else ~/.local/share/..."


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    embedded = groups.add_parser(
        "embedded",
        help="the embedded PostgreSQL server (used when no database URL is set)",
        description="With no database URL configured, Signoff starts a PostgreSQL server of its "
        f"own in a home folder ({_HOME}) and keeps it running for the next command. These "
        "commands show where it is, how to connect psql to it, and stop it.",
        epilog='examples: signoff embedded status; psql "$(signoff embedded url)"; '
        "signoff embedded stop",
    )
    commands = embedded.add_subparsers(
        dest="command", required=True, metavar="COMMAND", help="what to do with the server"
    )

    status = commands.add_parser(
        "status",
        help="where the server lives and whether it runs",
        description="Show the home folder, whether the server runs (and its pid), the data and "
        "socket folders, the PostgreSQL version and the URL; starts nothing.",
    )
    add_json_flag(status)
    status.set_defaults(run=_status)

    url = commands.add_parser(
        "url",
        help="print the URL of the server's `signoff` database, for psql",
        description="Print the libpq URL of the embedded server's `signoff` database (a unix "
        'socket, no TCP), e.g. for psql "$(signoff embedded url)". Starts nothing. As root the '
        f"server runs as the system user {SYSTEM_USER}: only root and that user can connect.",
    )
    add_json_flag(url)
    url.set_defaults(run=_url)

    stop = commands.add_parser(
        "stop",
        help="stop the server (fast shutdown); the next command that needs it starts it again",
        description="Stop the embedded server cleanly (open transactions roll back). Stopping a "
        "server that is not running is not an error.",
    )
    add_json_flag(stop)
    stop.set_defaults(run=_stop)


def _status(args: argparse.Namespace) -> int:
    settings = settings_of(args)
    st = server_status(settings.embedded_home)
    state = f"running (pid {st.pid})" if st.running else "not running (commands start it)"
    data = f"{st.data} (PostgreSQL {st.data_version})" if st.data_version else f"{st.data} (empty)"
    lines = [
        f"embedded PostgreSQL {st.version} in {st.home}",
        f"  server   {state}",
        f"  data     {data}",
        f"  sockets  {st.socket_dir} (no TCP port)",
        f"  url      {st.url}",
        f"  psql     {_psql_command(st)}",
        f"  access   {_access()}",
        f"  used     {_used(settings.embedded)}",
        "  stop     signoff embedded stop",
    ]
    emit(args, "\n".join(lines), _document(st) | {"used": settings.embedded})
    return 0


def _url(args: argparse.Namespace) -> int:
    st = server_status(settings_of(args).embedded_home)
    if not st.running and not args.json:
        print(
            "note: the embedded server is not running; any command that uses the database "
            "starts it (e.g. `signoff db current`)",
            file=sys.stderr,
        )
    emit(args, st.url, {"url": st.url, "psql": _psql_command(st), "running": st.running})
    return 0


def _stop(args: argparse.Namespace) -> int:
    st = server_status(settings_of(args).embedded_home)
    pid = stop_server(st.home)
    text = (
        f"stopped the embedded server (pid {pid}) in {st.home}"
        if pid is not None
        else f"the embedded server in {st.home} is not running"
    )
    emit(args, text, {"home": str(st.home), "stopped": pid is not None, "pid": pid})
    return 0


def _psql_command(st: EmbeddedStatus) -> str:
    # The bundled psql matches the server's version, and needs no PostgreSQL on the machine.
    return f"{shlex.quote(str(st.bin / 'psql'))} {shlex.quote(st.url)}"


def _access() -> str:
    who = f"root and {SYSTEM_USER}" if os.geteuid() == 0 else "you"
    return f"socket only, its folder {who} alone; postgres by peer ({who}), other roles by password"


def _used(embedded: bool) -> str:
    if embedded:
        return "yes: no database URL is configured"
    return "no: a database URL is configured (SIGNOFF_DATABASE_URL or DATABASE_URL)"


def _document(st: EmbeddedStatus) -> dict[str, Any]:
    return {
        "home": str(st.home),
        "running": st.running,
        "pid": st.pid,
        "data": str(st.data),
        "data_version": st.data_version,
        "socket_dir": str(st.socket_dir),
        "version": st.version,
        "url": st.url,
        "psql": _psql_command(st),
    }
