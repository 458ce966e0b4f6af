"""Every state of the audit tables `ledger verify` can meet is a finding (exit 1, a message),
never a crash: the stored tree's state row or tiles deleted or garbled, a signing key's public
key swapped in data_keys. And retiring a MAC or signing key keeps what it made verifiable.
Tampering is the owner's, in a scratch database, with triggers off."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from ledger.keys import KeyRing, LocalKek, Purpose
from ledger.store import Database

from .support.processes import TEST_KEK, kek_env, run_cli
from .test_digest import settle
from .test_ledger_verify import fill


@pytest.fixture
async def filled(fresh_database_url: str) -> AsyncIterator[tuple[str, Database]]:
    async with await Database.connect(fresh_database_url) as db:
        await fill(db)
        await settle(db)
        done = await run_cli("ledger", "integrate", database_url=fresh_database_url)
        assert done.code == 0, done.stdout + done.stderr
        yield fresh_database_url, db


async def as_owner(db: Database, *statements: str) -> None:
    async with db.transaction() as conn:
        await conn.execute("SET LOCAL session_replication_role = replica")  # triggers off
        for statement in statements:
            await conn.execute(statement)


async def found(url: str, *args: str) -> str:
    """`ledger ARGS` exits 1 with a finding, not 2 with an error; its output."""
    result = await run_cli("ledger", *args, database_url=url, env=kek_env())
    assert result.code == 1, result.stdout + result.stderr
    assert "unexpected" not in result.stderr, result.stderr
    return result.stdout + result.stderr


@pytest.mark.parametrize(
    ("tamper", "named"),
    [
        (("DELETE FROM tree_state",), "state row (tree_state) is missing"),
        (("UPDATE tree_state SET root = '\\x00'::bytea || substring(root FROM 2)",), "root"),
        (("UPDATE tree_state SET tree_size = tree_size + 1000",), "events were deleted"),
        (("UPDATE tree_state SET last_position = last_position + 1",), "last leaf"),
        (("DELETE FROM tree_tiles",), "missing"),
        (("UPDATE tree_tiles SET hashes = substring(hashes FROM 33) WHERE level = 0",), "tile 0/0"),
    ],
)
async def test_a_garbled_stored_tree_is_a_finding_for_verify_and_digest(
    filled: tuple[str, Database], tamper: tuple[str, ...], named: str, tmp_path: Path
) -> None:
    url, db = filled
    before = tmp_path / "before.json"
    taken = await run_cli("ledger", "digest", "--out", str(before), database_url=url, env=kek_env())
    assert taken.code == 0, taken.stdout + taken.stderr
    await as_owner(db, *tamper)
    assert named in await found(url, "verify")
    after = tmp_path / "after.json"
    if "root" in named:  # the state's root is no input to a digest: it signs the events' root
        taken = await run_cli(
            "ledger", "digest", "--out", str(after), database_url=url, env=kek_env()
        )
        assert taken.code == 0, taken.stderr
        assert json.loads(after.read_text())["root"] == json.loads(before.read_text())["root"]
    else:
        assert "TAMPERED" in await found(url, "digest", "--out", str(after))
        assert not after.exists(), "nothing signed"
    await found(url, "verify", "--digest", str(before))
    await found(url, "verify", "--since-digest", str(before))


async def test_a_swapped_digest_public_key_is_a_finding(
    filled: tuple[str, Database], tmp_path: Path
) -> None:
    url, db = filled
    digest = tmp_path / "digest.json"
    taken = await run_cli("ledger", "digest", "--out", str(digest), database_url=url, env=kek_env())
    assert taken.code == 0, taken.stdout + taken.stderr
    swapped = os.urandom(32).hex()
    await as_owner(
        db, f"UPDATE data_keys SET public_key = '\\x{swapped}' WHERE purpose = 'digest_signing'"
    )
    plain = await found(url, "verify")
    assert "TAMPERED" in plain and swapped in plain
    as_json = json.loads(
        (await run_cli("ledger", "verify", "--json", database_url=url, env=kek_env())).stdout
    )
    assert as_json["ok"] is False
    assert any("digest_signing key" in p and swapped in p for p in as_json["problems"])
    with_digest = await found(url, "verify", "--digest", str(digest))
    assert "DOES NOT MATCH" in with_digest and "refused" in with_digest


async def test_retiring_a_mac_key_keeps_what_it_made_verifiable(
    filled: tuple[str, Database],
) -> None:
    url, db = filled
    ring = await KeyRing.open(db, LocalKek(TEST_KEK))
    old = ring.active_key_id(Purpose.APPROVAL_MAC)
    await ring.rotate(Purpose.APPROVAL_MAC)
    retired = await run_cli("keys", "retire", old, database_url=url, env=kek_env())
    assert retired.code == 0, retired.stdout + retired.stderr
    await fill(db)  # new approvals, MACed under the new key
    result = await run_cli("ledger", "verify", database_url=url, env=kek_env())
    assert result.code == 0, result.stdout + result.stderr
    assert result.stdout.startswith("ledger intact:")


@pytest.mark.parametrize("purpose", ["approval_mac", "digest_signing"])
async def test_a_garbled_wrapped_key_is_a_finding(
    filled: tuple[str, Database], purpose: str, tmp_path: Path
) -> None:
    url, db = filled
    digest = tmp_path / "digest.json"
    taken = await run_cli("ledger", "digest", "--out", str(digest), database_url=url, env=kek_env())
    assert taken.code == 0, taken.stdout + taken.stderr
    await as_owner(
        db,
        "UPDATE data_keys SET wrapped = overlay(wrapped PLACING '\\xffff'::bytea FROM 20) "
        f"WHERE purpose = '{purpose}'",
    )
    if purpose == "approval_mac":
        assert "does not open" in await found(url, "verify")
    else:
        assert "does not open" in await found(url, "verify", "--digest", str(digest))
