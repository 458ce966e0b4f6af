"""PostgreSQL client programs (pg_dump, psql, ...) that match the server a test talks to."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ledger.store.db import open_raw_connection
from ledger.store.embedded import client_bin, home_of

__all__ = ["client_tool", "schema_of"]


async def client_tool(url: str, name: str) -> Path:
    """The client program `name` for the server of `url`: the embedded install's own for the
    embedded server, else the system's of the server's major version (or a newer one on PATH:
    pg_dump refuses servers newer than itself)."""
    if (home := home_of(url)) is not None:
        return client_bin(home) / name
    conn = await open_raw_connection(url)
    try:
        major = int(await conn.fetchval("SHOW server_version_num")) // 10000
    finally:
        await conn.close()
    for folder in (f"/usr/lib/postgresql/{major}/bin", f"/usr/pgsql-{major}/bin"):
        if (candidate := Path(folder) / name).is_file():
            return candidate
    if (found := shutil.which(name)) is not None and _major(found) >= major:
        return Path(found)
    pytest.fail(f"no {name} of PostgreSQL {major} or newer on this machine")


def _major(program: str) -> int:
    out = subprocess.run([program, "--version"], capture_output=True, text=True).stdout
    match = re.search(r"(\d+)", out)  # "pg_dump (PostgreSQL) 15.8"
    return int(match.group(1)) if match else 0


async def schema_of(url: str) -> str:
    """The database's schema as `pg_dump --schema-only` prints it, without comments and the
    per-run `\\restrict` key."""
    pg_dump = await client_tool(url, "pg_dump")
    out = await asyncio.to_thread(
        subprocess.run,
        [str(pg_dump), "--schema-only", "--dbname", url],
        capture_output=True,
        text=True,
        check=True,
    )
    keep = [ln for ln in out.stdout.splitlines() if ln.strip() and not ln.startswith(("--", "\\"))]
    return "\n".join(_columns_sorted(keep))


def _columns_sorted(lines: list[str]) -> list[str]:
    """The columns of each CREATE TABLE in name order: a migration that changes a column's type
    through a new column and a rename cannot put it back in its place, and order carries no
    meaning for Signoff's queries (none selects `*` into positions)."""
    out: list[str] = []
    columns: list[str] | None = None
    for line in lines:
        if columns is None:
            out.append(line)
            if line.startswith("CREATE TABLE ") and line.endswith("("):
                columns = []
        elif line.startswith(")"):
            out.extend(sorted(c.rstrip(",") for c in columns))
            out.append(line)
            columns = None
        else:
            columns.append(line)
    return out
