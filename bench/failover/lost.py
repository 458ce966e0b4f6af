"""The asynchronous run: a failover that loses committed transactions, made to happen every
time, and what Signoff does about it.

1. Load on a cluster with asynchronous streaming, replicated to both standbys.
2. Both standbys stop (cleanly: what they received is theirs); the primary goes on alone, as an
   asynchronous primary does, and acknowledges more calls, decisions and checkpoints.
3. A digest is signed on it: it covers those commits.
4. The primary is lost (SIGKILL of the node); the standbys come back and one is promoted
   (`maximum_lag_on_failover` lets a standby that far behind be promoted): the commits of
   step 2 are gone.
5. What Signoff then says and does: the workers that saw the lost commits refuse and record
   the loss (`signoff db history`); `ledger verify --digest` with the digest of step 3, plain
   `ledger verify`, the acknowledged work now missing; a lost call asked for again by a new
   process (as a LangGraph run resumed from an older checkpoint would ask for it) is refused
   while the loss is open; once an operator settles it, calls start again.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import asyncpg

from tests.support.until import until

from .checks import database_problems, stderr_problems
from .cluster import LOOK, cluster
from .harness import Options, program, rig

__all__ = ["lost_commits"]

ALONE_CALLS = 30  # calls the primary acknowledges alone before the digest


async def lost_commits(workers: int = 2, *, keep: bool = False) -> list[dict[str, Any]]:
    options = Options(rounds=0, workers=workers, flows=2)
    lines: list[dict[str, Any]] = []
    with cluster(synchronous=False, keep=keep) as made:
        out = made.root.parent / "out"
        out.mkdir()
        async with rig(made, out, options) as r:
            await until(lambda: len(r.acks().of("call")) >= ALONE_CALLS, 120, "calls acknowledged")
            primary = made.leader()
            assert primary is not None
            standbys = [n for n in made.nodes if n is not primary]
            for node in standbys:
                await asyncio.to_thread(made.stop_node, node)
            cut_at = time.time()

            def alone() -> bool:
                return sum(float(c["t"]) > cut_at for c in r.acks().of("call")) >= ALONE_CALLS

            await until(alone, 120, f"{ALONE_CALLS} calls on the primary alone", step=LOOK)
            pre = out / "digest-before.json"
            signed = await r.cli("ledger", "digest", "--out", str(pre))
            if signed.code != 0:
                raise RuntimeError(f"ledger digest failed: {signed.stderr}")
            killed_at = time.time()
            await asyncio.to_thread(made.kill, primary)
            for node in standbys:
                made.start_node(node)
            successor = await asyncio.to_thread(made.wait_leader, 180, not_=primary)

            flows = options.workers * options.flows

            def settled() -> bool:  # every flow served again or refused
                acks = r.acks()
                served = {c["run"] for c in acks.of("call") if c["t"] > killed_at}
                return len(served | {f["run"] for f in acks.of("refused")}) >= flows

            await until(settled, 180, "every flow served again or refused", step=LOOK)
            recorded = await r.cli("db", "history", "--json")
            acks = r.acks()
            lost_calls = [
                c for c in acks.of("call") if cut_at < c["t"] < killed_at and not c["replayed"]
            ]
            rerun = (
                await _again(r.worker_env, r.worker_url, out, lost_calls[0]) if lost_calls else {}
            )
            settled_by_operator = await r.cli(
                "db", "history", "settle", "--reason", "lost calls accounted for"
            )
            after = (
                await _again(r.worker_env, r.worker_url, out, lost_calls[-1]) if lost_calls else {}
            )
        acks = r.acks()
        problems = await database_problems(r.owner_url, acks)
        approvals = await _approvals_now(r.owner_url, [c["approval"] for c in lost_calls])
        with_digest = await r.cli("ledger", "verify", "--digest", str(pre))
        plain = await r.cli("ledger", "verify")
    named = with_digest.stdout + with_digest.stderr
    lines.append(
        {
            "mode": "async",
            "killed": primary.name,
            "promoted": successor.name,
            "acknowledged_on_the_lost_primary_alone": len(lost_calls),
            "acknowledged_calls_missing": sum("is not in the ledger" in p for p in problems),
            "verify_digest_exit": with_digest.code,
            "verify_digest_says": _first_line(named, "DOES NOT MATCH")
            or named.strip().splitlines()[:1],
            "verify_exit": plain.code,
            "live_flows_refused": len(acks.of("refused")),
            "lost_calls_approvals_now": approvals,
            "history_losses": _losses(recorded.stdout),
            "executed_again": rerun,
            "settle_exit": settled_by_operator.code,
            "executed_after_settling": after,
            "problems": problems[:20] + stderr_problems(r.said),
        }
    )
    detected = with_digest.code == 1 and "digest" in named.lower()
    refused = rerun.get("answer", {}).get("refused") == "HistoryLost" and not rerun["tool_ran"]
    lines.append(
        {
            "mode": "async",
            "lost_commits_detected": detected,
            "loss_recorded": recorded.code == 1,
            "lost_call_refused": refused,
            "ok": detected and recorded.code == 1 and refused and settled_by_operator.code == 0,
        }
    )
    return lines


async def _again(env: dict[str, str], url: str, out: Path, call: dict[str, Any]) -> dict[str, Any]:
    """A new process executes a call the lost primary had acknowledged, with the same id."""
    n = int(call["call"].removeprefix("c"))
    process = await program(
        env,
        "again",
        "--url",
        url,
        "--run",
        call["run"],
        "--call",
        call["call"],
        "--n",
        str(n),
        "--out",
        str(out),
        ready=False,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 120)
    said = stdout.decode().strip().splitlines()
    answer: dict[str, Any] = json.loads(said[-1]) if said else {"stderr": stderr.decode()[-500:]}
    runs = (
        (out / "again.effects").read_text().count("\n") if (out / "again.effects").exists() else 0
    )
    return {"call": f"{call['run']}/{call['call']}", "answer": answer, "tool_ran": runs > 0}


async def _approvals_now(url: str, approval_ids: list[str | None]) -> dict[str, int]:
    """What the promoted server holds of the approvals the lost calls consumed: `missing`
    (the request was lost too: a new one needs a new decision), or its status and whether it
    is consumed (`approved, unused`: its consumption was lost, and it could be consumed
    again)."""
    ids = [a for a in approval_ids if a is not None]
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            "SELECT approval_id, status::text, consumed_by IS NOT NULL AS used FROM approvals"
            " WHERE approval_id = ANY($1::text[])",
            ids,
        )
    finally:
        await conn.close()
    found = {r["approval_id"]: f"{r['status']}, {'used' if r['used'] else 'unused'}" for r in rows}
    counts: dict[str, int] = {}
    for approval_id in ids:
        state = found.get(approval_id, "missing")
        counts[state] = counts.get(state, 0) + 1
    return counts


def _losses(listed: str) -> list[dict[str, Any]]:
    """`signoff db history --json`, shortened: who found each loss, how many positions."""
    try:
        losses = json.loads(listed)["losses"]
    except (ValueError, KeyError):
        return [{"unreadable": listed[-300:]}]
    return [
        {"found_by": x["found_by"], "missing": len(x["missing"]), "open": x["open"]} for x in losses
    ]


def _first_line(text: str, marker: str) -> str | None:
    return next((line.strip() for line in text.splitlines() if marker in line), None)
