"""A primary lost under load, on a three-node Patroni cluster with synchronous replication
(`bench/failover`, one round): no acknowledged call, decision or checkpoint lost, no approval
consumed twice, no single-attempt call run twice, `ledger verify` and a digest signed before
the failover intact and consistent with one after, and no driver traceback in any process.

It runs a cluster of its own for about 40 s, so it runs only when asked:
SIGNOFF_REQUIRE_FAILOVER=1 (CI sets it in its suite on the machine's PostgreSQL). It needs
Debian's `patroni` and `etcd-server` and PostgreSQL 15's server binaries; asked without them, it
fails."""

from __future__ import annotations

import os

import pytest

from bench.failover.cluster import installed
from bench.failover.run import run_sync

pytestmark = [pytest.mark.failover, pytest.mark.timeout(420)]


def require_cluster_tools() -> None:
    if os.environ.get("SIGNOFF_REQUIRE_FAILOVER") != "1":
        pytest.skip("a 40 s cluster run: set SIGNOFF_REQUIRE_FAILOVER=1 to run it")
    if (missing := installed()) is not None:
        pytest.fail(f"SIGNOFF_REQUIRE_FAILOVER is set and {missing} is missing")


async def test_a_synchronous_failover_loses_nothing_and_resumes_on_the_new_primary() -> None:
    require_cluster_tools()
    [failover, checks] = await run_sync(rounds=1, workers=1, steady=3.0)
    assert checks["problems"] == []
    assert checks["ok"]
    assert failover["promoted"] != failover["killed"]
    # The load ran on both sides of the failover: acknowledged on the old primary, then on the
    # promoted one.
    assert failover["calls_per_s_before"] > 0 and failover["calls_per_s_after"] > 0
    counts = checks["checks"]
    assert counts["calls_acknowledged"] > 0 and counts["approvals_decided"] > 0
    assert counts["checkpoints"] > 0
