"""Signed resolutions: a reviewer's verdict on an `outcome_unknown` call, signed like a decision.

A `call.resolved` event carries `signature` (`ledger.keys.attest`) over the call's request
digest (its binding: run, call, tool, effect and arguments), its stream id, the verdict
(`resolve:succeeded` / `resolve:failed`) and the digest of the note it records, who resolved it
and when. Only the reviewer side can make one; `resolution_problem` checks one for `verify`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..canonical import format_time
from ..keys import KeyRing
from ..keys.attest import Statement, sign_statement, statement_ok
from ..store import Database
from . import _sql as sql

__all__ = [
    "ResolutionProblem",
    "every_resolution_problem",
    "resolution_problem",
    "resolution_statement",
    "sign_resolution",
]


@dataclass(frozen=True, slots=True)
class ResolutionProblem:
    stream_id: str
    version: int
    message: str

    def __str__(self) -> str:
        return f"{self.stream_id} (version {self.version}): the resolution {self.message}"


def resolution_statement(stream_id: str, request_digest: str, data: Mapping[str, Any]) -> Statement:
    """What a `call.resolved` event's signature covers (`data` is the event's data)."""
    return Statement(
        binding=request_digest,
        subject=stream_id,
        kind=f"resolve:{data['status']}",
        payload={"result_digest": data["result_digest"]},
        reviewer=data["by"],
        groups=(),
        at=format_time(datetime.fromisoformat(data["at"])),
    )


def sign_resolution(
    ring: KeyRing, stream_id: str, request_digest: str, data: dict[str, Any]
) -> dict[str, Any]:
    """`data` with its signature (raises `ReviewerKekMissing` on a worker's ring)."""
    signed = sign_statement(ring, resolution_statement(stream_id, request_digest, data))
    return {**data, "signature": signed}


async def resolution_problem(
    ring: KeyRing, stream_id: str, request_digest: str, data: Mapping[str, Any]
) -> str | None:
    """None when a `call.resolved` event's signature verifies; else what is wrong ("unsigned"
    for one that carries none)."""
    try:
        statement = resolution_statement(stream_id, request_digest, data)
    except (KeyError, TypeError, ValueError) as e:
        return f"a malformed resolution: {e!r}"
    return await statement_ok(ring, statement, data.get("signature"))


async def every_resolution_problem(db: Database, ring: KeyRing) -> list[ResolutionProblem]:
    """`resolution_problem` of every `call.resolved` event in the journal."""
    async with db.connection() as conn:
        rows = await conn.fetch(sql.RESOLUTIONS)
    problems = []
    for row in rows:
        digest = row["request_digest"] or ""
        data = json.loads(row["data"])
        why = await resolution_problem(ring, row["stream_id"], digest, data)
        if why is not None:
            problems.append(ResolutionProblem(row["stream_id"], row["version"], why))
    return problems
