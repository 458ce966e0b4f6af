"""What must hold after the failovers, read from the processes' logs and the database the
cluster's primary now serves. Each check returns the problems it found (none: it holds)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

__all__ = ["Acks", "database_problems", "read_acks", "stderr_problems"]

# What a driver's own error looks like when it escapes to a process's stderr.
_RAW = ("Traceback (most recent call last)", "asyncpg.exceptions", "psycopg.OperationalError")


@dataclass
class Acks:
    """Every line the workers and the decider wrote, and every run of the tool."""

    lines: list[dict[str, Any]] = field(default_factory=list)
    effects: Counter[tuple[str, str]] = field(default_factory=Counter)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line["kind"] == kind]

    def calls(self) -> dict[tuple[str, str], str]:
        """(run, call id) -> the status the worker was told, its last answer."""
        return {(c["run"], c["call"]): c["status"] for c in self.of("call")}


def read_acks(out: Path) -> Acks:
    acks = Acks()
    for path in sorted(out.glob("*.acks")):
        acks.lines += [json.loads(line) for line in path.read_text().splitlines()]
    acks.lines.sort(key=lambda line: float(line["t"]))
    for path in sorted(out.glob("*.effects")):
        for line in path.read_text().splitlines():
            run_id, call_id, _pid, _attempt = line.split()
            acks.effects[(run_id, call_id)] += 1
    return acks


async def database_problems(url: str, acks: Acks) -> list[str]:
    """No acknowledged call, decision or checkpoint missing; no approval consumed twice; no
    single-attempt call run twice (by the tool's own log); every approval consumed; no loss of
    committed history recorded."""
    problems: list[str] = []
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch("SELECT run_id, call_id, status::text, attempts FROM tool_calls")
        approvals = {
            r["approval_id"]: (r["status"], r["consumed"])
            for r in await conn.fetch(
                "SELECT approval_id, status::text, consumed_by IS NOT NULL AS consumed"
                " FROM approvals"
            )
        }
        twice = await conn.fetch(
            "SELECT stream_id, count(*) AS n FROM events WHERE type = 'approval.consumed'"
            " GROUP BY stream_id HAVING count(*) > 1"
        )
        checkpoints = {
            (r["thread_id"], r["checkpoint_id"])
            for r in await conn.fetch("SELECT thread_id, checkpoint_id FROM checkpoints")
        }
        losses = await conn.fetch("SELECT loss_id, found_by, missing FROM history_losses")
    finally:
        await conn.close()
    recorded = {(r["run_id"], r["call_id"]): r for r in rows}
    for key, status in acks.calls().items():
        row = recorded.get(key)
        if row is None:
            problems.append(f"acknowledged call {key} is not in the ledger")
        elif row["status"] != status:
            problems.append(
                f"call {key} was acknowledged {status}, the ledger says {row['status']}"
            )
    for line in acks.of("decided"):
        if approvals.get(line["approval"], ("pending", False))[0] == "pending":
            problems.append(f"acknowledged decision of {line['approval']} is not recorded")
    for line in acks.of("checkpoint"):
        if (line["thread"], line["id"]) not in checkpoints:
            problems.append(f"acknowledged checkpoint {line['id']} of {line['thread']} is lost")
    problems += [f"approval stream {r['stream_id']} consumed {r['n']} times" for r in twice]
    problems += [f"call {key} ran {n} times" for key, n in acks.effects.items() if n > 1]
    problems += [
        f"call {key} ran but the ledger has no record of it"
        for key in acks.effects
        if key not in recorded
    ]
    problems += [
        f"call {key} made {r['attempts']} attempts"
        for key, r in recorded.items()
        if r["attempts"] > 1
    ]
    problems += [f"approval {a} left {s}, unused" for a, (s, used) in approvals.items() if not used]
    problems += [
        f"loss {r['loss_id']} of {len(r['missing'])} events recorded by {r['found_by']}"
        for r in losses
    ]
    return problems


def stderr_problems(said: dict[str, str]) -> list[str]:
    """A driver's traceback or error class in any process's stderr."""
    return [
        f"{name}: {marker!r} on stderr"
        for name, text in said.items()
        for marker in _RAW
        if marker in text
    ]
