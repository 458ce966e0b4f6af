"""`signoff doctor`: the health checks `/readyz` runs (`ledger.health`), against the configured
database with the configured KEKs, one line each and what to do about each that fails."""

from __future__ import annotations

import argparse
import asyncio

from ledger.health import Check, Health, Status, diagnose

from .context import settings_of
from .output import add_json_flag, emit, safe

_EXAMPLES = """\
examples:
  signoff doctor                                  the configured database and KEKs
  signoff doctor --database-url postgresql://signoff_service@db.internal/signoff
  signoff doctor --json                           for a script: {"ok": ..., "checks": [...]}

Exit status: 0 when every check passes (a warning passes), 1 when one fails, 2 for a usage or
configuration error, as every command.
"""

_SHOWN = {Status.OK: "ok", Status.WARN: "WARN", Status.FAIL: "FAIL"}


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    doctor = groups.add_parser(
        "doctor",
        help="check the database, its schema, the keys and the journal's horizon",
        description="""\
Run the health checks that the service's /readyz runs, on this login and with these KEKs:
the database answers, its schema is at head, the data keys open under the KEK, no
transaction holds back the journal's global order longer than SIGNOFF_HORIZON_READY_SECONDS
(default 120), and each sealing key's nonce budget (a warning only). One line per check; a
check that fails or warns is followed by what to do.""",
        epilog=_EXAMPLES,
    )
    add_json_flag(doctor)
    doctor.set_defaults(run=_run)


def _lines(check: Check) -> list[str]:
    line = f"{_SHOWN[check.status]:<5} {check.name:<13} {safe(check.detail)}"
    if check.status is Status.OK:
        return [line]
    return [line, f"{'':<5} {'':<13} remedy: {safe(check.remedy)}"]


def _text(health: Health) -> str:
    lines = [line for check in health.checks for line in _lines(check)]
    failed = health.failed
    lines.append(f"{len(failed)} check(s) failed: {', '.join(failed)}" if failed else "healthy")
    return "\n".join(lines)


def _run(args: argparse.Namespace) -> int:
    health = asyncio.run(diagnose(settings_of(args)))
    data = {
        "ok": health.ok,
        "checks": [
            {"name": c.name, "status": c.status.value, "detail": c.detail, "remedy": c.remedy}
            for c in health.checks
        ],
    }
    emit(args, _text(health), data)
    return 0 if health.ok else 1
