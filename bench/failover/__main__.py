"""`python -m bench.failover --mode sync|async`: prints one JSON line per failover round, then
the checks (`"ok": true` when every invariant held); exit 1 when one did not."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from ledger.log import configure_logging

from .cluster import installed
from .run import run_async, run_sync


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.failover", description=__doc__)
    parser.add_argument("--mode", choices=("sync", "async"), default="sync")
    parser.add_argument("--rounds", type=int, default=2, help="failovers in sync mode")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--steady", type=float, default=8.0, help="seconds measured each side")
    parser.add_argument("--keep", action="store_true", help="keep the folder (logs, digests)")
    args = parser.parse_args()
    if (missing := installed()) is not None:
        sys.exit(f"needs etcd, Patroni and PostgreSQL 15: missing {missing}")
    configure_logging("WARNING")
    lines: list[dict[str, Any]]
    if args.mode == "sync":
        lines = asyncio.run(run_sync(args.rounds, args.workers, args.steady, keep=args.keep))
    else:
        lines = asyncio.run(run_async(args.workers, keep=args.keep))
    for line in lines:
        print(json.dumps(line), flush=True)
    sys.exit(0 if lines[-1]["ok"] else 1)


if __name__ == "__main__":
    main()
