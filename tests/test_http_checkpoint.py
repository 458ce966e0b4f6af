"""`GET /v1/ledger/checkpoint` over real HTTP, on the service's login with only
`signoff_reviewer`: an auditor's C2SP checkpoint of the journal, and a witness (its own
process, no database) that cosigns it with the proof the service gives an auditor."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from adapters.http.server import running
from adapters.http.service import open_service
from ledger.audit.checkpoint import ED25519, Checkpoint, SignedNote, VerifierKey, signed_by
from ledger.audit.digest import signing_keys
from ledger.audit.verifier import Digest, check_digest
from ledger.journal import Journal
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database
from ledger.store.logins import temporary_login
from ledger.store.settings import Settings

from .support.http import token_for, unique
from .support.processes import TEST_KEK, TEST_REVIEWER_KEK, run_cli
from .test_digest import fill, settle

ORIGIN = "example.com/signoff/http"


async def serving(database_url: str, origin: str | None) -> AsyncIterator[httpx.AsyncClient]:
    async with temporary_login(database_url, "signoff_reviewer") as url:
        settings = Settings(
            database_url=url,
            kek=LocalKek(TEST_KEK),
            reviewer_kek=LocalKek(TEST_REVIEWER_KEK),
            log_origin=origin,
        )
        service = await open_service(settings, pool_size=2)
        try:
            async with (
                running(service) as (_, port),
                httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as client,
            ):
                yield client
        finally:
            await service.close()


@pytest.fixture(scope="module")
async def client(database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async for c in serving(database_url, ORIGIN):
        yield c


async def test_an_auditor_gets_a_checkpoint_signed_by_the_digest_key(
    client: httpx.AsyncClient, db: Database, ring: KeyRing, tmp_path: Path
) -> None:
    auditor = await token_for(db, unique("audit"), scope="auditor")
    reviewer = await token_for(db, unique("rita"))
    await fill(Journal(db), streams=1, versions=2)
    await settle(db)
    response = await client.get("/v1/ledger/checkpoint", headers=auditor)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    note = SignedNote.parse(response.text)
    checkpoint = Checkpoint.parse(note.text)
    assert checkpoint.origin == ORIGIN and checkpoint.tree_size > 0
    async with ring.sealing():
        keys = signing_keys(ring)
    assert any(signed_by(note, VerifierKey(ORIGIN, ED25519, k)) for k in keys.values())
    assert (await client.get("/v1/ledger/checkpoint", headers=reviewer)).status_code == 403
    assert (await client.get("/v1/ledger/checkpoint")).status_code == 401

    # The digest carries the same kind of note; a witness cosigns the newer one with the
    # consistency proof an auditor asked the service for, in a process with no database.
    old = (await client.get("/v1/ledger/digest", headers=auditor)).json()
    check_digest(Digest.from_dict(old), keys)
    await fill(Journal(db), streams=1, versions=2)
    await settle(db)
    new = (await client.get("/v1/ledger/digest", headers=auditor)).json()
    proof = await client.post(
        "/v1/ledger/proofs/consistency", headers=auditor, json={"old": old, "new": new}
    )
    assert proof.status_code == 200, proof.text
    files = {name: tmp_path / f"{name}.json" for name in ("old", "new", "proof")}
    for name, doc in (("old", old), ("new", new), ("proof", proof.json())):
        files[name].write_text(json.dumps(doc))
    vkey = VerifierKey(ORIGIN, ED25519, keys[new["key_id"]]).vkey
    env = {"PATH": "/usr/bin:/bin", "SIGNOFF_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}
    key, state = tmp_path / "w.key", tmp_path / "w.state"
    assert (
        await run_cli(
            "ledger", "witness", "init", "--key", str(key), "--name", "w.example/h", env=env
        )
    ).code == 0
    base = ["ledger", "witness", "cosign", "--key", str(key), "--state", str(state)]
    base += ["--log-key", vkey]
    first = await run_cli(*base, "--digest", str(files["old"]), env=env)
    assert first.code == 0, first.stderr
    second = await run_cli(
        *base, "--digest", str(files["new"]), "--proof", str(files["proof"]), env=env
    )
    assert second.code == 0, second.stderr
    cosigned = SignedNote.parse(Digest.from_json(second.stdout).checkpoint or "")
    assert [s.name for s in cosigned.signatures] == [ORIGIN, "w.example/h"]


async def test_a_log_without_an_origin_serves_no_checkpoint(
    database_url: str, db: Database
) -> None:
    auditor = await token_for(db, unique("audit"), scope="auditor")
    async for plain in serving(database_url, None):
        response = await plain.get("/v1/ledger/checkpoint", headers=auditor)
        assert response.status_code == 503
        assert "SIGNOFF_LOG_ORIGIN" in response.json()["message"]
        digest = (await plain.get("/v1/ledger/digest", headers=auditor)).json()
        assert "checkpoint" not in digest
