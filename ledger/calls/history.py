"""A run's history as policies read it: per tool, how many calls started running and the sums
of their numeric top-level arguments, over the whole run, since the top of the current UTC hour
and since UTC midnight.

`signoff_commit_call` adds each call that starts running to `call_tallies` in the statement that
records its intent (`tally_of` is what it is given); `run_history` reads at most (tools x 25)
rows, whatever the run's length. A policy that read the history is recorded as `Judgment.seen`
(the run's calls it counted): a call that meets calls started since is refused (`HistoryMoved`)
and judged again, so limits hold under concurrent calls.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import asyncpg

__all__ = ["Judgment", "RunHistory", "ToolTally", "run_history", "tally_of"]

_HISTORY = """
SELECT tool, bucket = '-infinity' AS whole, bucket >= date_trunc('hour', now(), 'UTC') AS hour,
       calls, sums::text
FROM call_tallies
WHERE run_id = $1 AND (bucket = '-infinity' OR bucket >= date_trunc('day', now(), 'UTC'))
"""


@dataclass(frozen=True)
class Judgment:
    """What a policy decided of a call, recorded in its `call.started` as `policy_decision`,
    and how many of the run's calls it counted (`seen`; None when it read no history)."""

    record: Mapping[str, Any]
    seen: int | None = None


@dataclass(frozen=True)
class ToolTally:
    calls: int = 0
    sums: Mapping[str, Decimal] = field(default_factory=dict)

    def plus(self, calls: int, sums: Mapping[str, Decimal]) -> ToolTally:
        merged = dict(self.sums)
        for name, value in sums.items():
            merged[name] = merged.get(name, Decimal(0)) + value
        return ToolTally(self.calls + calls, merged)


@dataclass(frozen=True)
class RunHistory:
    """Per tool: the whole run, this UTC hour, this UTC day; `seen` is the run's calls."""

    run: Mapping[str, ToolTally] = field(default_factory=dict)
    hour: Mapping[str, ToolTally] = field(default_factory=dict)
    day: Mapping[str, ToolTally] = field(default_factory=dict)

    @property
    def seen(self) -> int:
        return sum(t.calls for t in self.run.values())


async def run_history(conn: asyncpg.Connection, run_id: str) -> RunHistory:
    """The history of `run_id` as the database has it now (by the server's clock)."""
    run: dict[str, ToolTally] = {}
    hour: dict[str, ToolTally] = {}
    day: dict[str, ToolTally] = {}
    for row in await conn.fetch(_HISTORY, run_id):
        sums = {k: Decimal(str(v)) for k, v in json.loads(row["sums"]).items()}
        tool, calls = row["tool"], row["calls"]
        if row["whole"]:
            run[tool] = run.get(tool, ToolTally()).plus(calls, sums)
            continue
        day[tool] = day.get(tool, ToolTally()).plus(calls, sums)
        if row["hour"]:
            hour[tool] = hour.get(tool, ToolTally()).plus(calls, sums)
    return RunHistory(run, hour, day)


def tally_of(args: Mapping[str, Any], judgment: Judgment | None) -> str:
    """The `p_tally` of a call that starts with `args`: its finite numeric top-level arguments
    (booleans are not numbers) and the count its policy judged it on."""
    sums = {
        k: v
        for k, v in args.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    }
    tally: dict[str, Any] = {"sums": sums}
    if judgment is not None and judgment.seen is not None:
        tally["seen"] = judgment.seen
    return json.dumps(tally)
