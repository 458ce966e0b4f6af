"""What `signoff` prints: stored values escaped for the terminal, CSV that no spreadsheet runs,
progress bars only on a terminal, a new KEK made safely, and KEK errors that say what to do."""

from __future__ import annotations

import base64
import csv
import fcntl
import io
import os
import pty
import re
import select
import stat
import struct
import subprocess
import sys
import termios
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from adapters.cli import main
from adapters.cli.output import csv_cell, safe
from ledger.calls.model import CallContext, Effect, ToolCall, ToolPolicy
from ledger.calls.service import ToolLedger
from ledger.errors import KeyStateError
from ledger.journal import Journal, NewEvent
from ledger.keys import KeyRing, LocalKek, Purpose
from ledger.store import Database
from tests.support.scratch import scratch_database

from .support.processes import ROOT, TEST_KEK

FORGED = "refund\x1b[2K\rforged-row   run-0   ok"
FORMULA = '=HYPERLINK("http://evil.example","click")'


@pytest.fixture(autouse=True)
def logging_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """`main()` runs in this process here: it must not point the session's loggers at a
    captured stderr that closes after the test."""
    monkeypatch.setattr("adapters.cli.configure_logging", lambda *_, **__: None)


def test_safe_escapes_control_and_bidi_characters() -> None:
    assert safe("a\x1b[2Kb") == "a\\x1b[2Kb"
    assert safe("a\rb\nc\td\x7fe\x9bf") == "a\\x0db\\x0ac\\x09d\\x7fe\\x9bf"
    assert safe("gpj.\u202eexe") == "gpj.\\u202eexe"
    assert safe("\u2066x\u2069\u200f") == "\\u2066x\\u2069\\u200f"
    assert safe("not utf-8 \udcff") == "not utf-8 \\udcff"
    assert safe("line\nnext", keep_newlines=True) == "line\nnext"
    assert safe("Zoë → ok, 東京") == "Zoë → ok, 東京"


def test_csv_cells_that_a_spreadsheet_would_run_are_neutralised() -> None:
    for formula in ("=1+1", "+1", "-1", "@SUM(A1)", "\tx", "\rx"):
        cell = csv_cell(formula)
        assert isinstance(cell, str) and cell.startswith("'"), cell
    assert csv_cell("refund") == "refund"
    assert csv_cell(3) == 3 and csv_cell(None) is None


@pytest.fixture(scope="module")
async def forged_url(server_url: str) -> AsyncIterator[dict[str, Any]]:
    """A run whose tools a model named with a terminal escape and with a formula."""
    async with scratch_database(server_url, prefix="signoff_test") as url:
        async with await Database.connect(url) as db:
            ring = await KeyRing.open(db, LocalKek(TEST_KEK))
            ledger = ToolLedger(db, ring)
            run = f"run-{uuid.uuid4().hex[:8]}"

            async def tool(args: dict[str, Any], context: CallContext) -> dict[str, Any]:
                return {"ok": True}

            for call_id, name in (("c1", FORGED), ("c2", FORMULA)):
                await ledger.execute(
                    ToolCall(run, call_id, name, {}), tool, ToolPolicy(Effect.READ)
                )
            await ledger.close()
        yield {"url": url, "run": run}


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_a_tool_name_cannot_forge_a_row_of_the_calls_table(
    forged_url: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["ledger", "calls", "--run", forged_url["run"], "--database-url", forged_url["url"]]
    code, out, _ = _run(argv, capsys)
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 3  # the header and the two calls, nothing forged
    assert "\x1b" not in out and "\r" not in out
    assert "refund\\x1b[2K\\x0dforged-row" in lines[1]
    code, out, _ = _run(["ledger", "show", forged_url["run"], "c1", *argv[-2:]], capsys)
    assert code == 0 and "\x1b" not in out and "\r" not in out


def test_the_calls_csv_neutralises_formulas_and_json_keeps_the_names(
    forged_url: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["ledger", "calls", "--run", forged_url["run"], "--database-url", forged_url["url"]]
    code, out, _ = _run([*argv, "--csv"], capsys)
    assert code == 0
    tools = [row["tool"] for row in csv.DictReader(io.StringIO(out))]
    assert tools == ["refund\\x1b[2K\\x0dforged-row   run-0   ok", "'" + FORMULA]
    code, out, _ = _run([*argv, "--json"], capsys)
    assert code == 0 and FORGED in out.encode().decode("unicode_escape")


# -- progress bars --------------------------------------------------------------------------


def _b64(key: bytes) -> str:
    return base64.b64encode(key).decode()


def _with_stderr_on_a_terminal(argv: list[str], url: str) -> tuple[int, str]:
    """Run `signoff ARGV` with stderr on a pseudo-terminal; return its exit code and what the
    terminal showed."""
    main_fd, terminal = pty.openpty()
    # A terminal 100 columns wide (a new pseudo-terminal has none, and tqdm draws to the width).
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    process = subprocess.Popen(
        [sys.executable, "-m", "adapters.cli", *argv, "--database-url", url],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=terminal,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "SIGNOFF_KEK": _b64(TEST_KEK),
            "TQDM_MININTERVAL": "0",  # draw every update: the commands here are quick
        },
    )
    os.close(terminal)
    shown = b""
    while True:
        ready, _, _ = select.select([main_fd], [], [], 120)
        if not ready:
            process.kill()
            break
        try:
            chunk = os.read(main_fd, 65536)
        except OSError:  # EIO: the process closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    os.close(main_fd)
    return process.wait(timeout=60), shown.decode(errors="replace")


@pytest.fixture(scope="module")
async def journal_url(server_url: str) -> AsyncIterator[str]:
    """A database whose journal has a few thousand events."""
    async with scratch_database(server_url, prefix="signoff_test") as url:
        async with await Database.connect(url) as db:
            await KeyRing.open(db, LocalKek(TEST_KEK))
            journal = Journal(db)
            for stream in range(30):
                events = [NewEvent("test.event", {"i": i}, "test") for i in range(100)]
                await journal.append(f"bar-{stream}", events, expected_version=0)
        yield url


@pytest.mark.parametrize(
    ("argv", "bar"),
    [
        (["ledger", "verify"], "verifying chains"),
        (["ledger", "digest"], "hashing"),
        (["ledger", "export"], "exporting"),
        (["checkpoints", "reencrypt"], "re-encrypting"),
    ],
)
def test_long_commands_show_a_bar_on_a_terminal_only(
    argv: list[str], bar: str, journal_url: str
) -> None:
    code, shown = _with_stderr_on_a_terminal(argv, journal_url)
    assert code == 0, shown
    assert bar in shown, shown
    if argv[0] == "checkpoints":  # no checkpoint rows here: a count of rows, no total
        assert "0row [" in shown, shown
        return
    # Counts of a total, time spent < time left, and a rate: "1000/3004 [00:00<00:00, 9k event/s]"
    assert re.search(r"\d+/\d+ \[\d\d:\d\d<\d\d:\d\d, *[\d.]+k? ?\w+/s\]", shown), shown
    code, shown = _with_stderr_on_a_terminal([*argv, "--json"], journal_url)
    assert (code, shown) == (0, "")
    piped = subprocess.run(
        [sys.executable, "-m", "adapters.cli", *argv, "--database-url", journal_url],
        cwd=ROOT,
        capture_output=True,
        env={
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "SIGNOFF_KEK": _b64(TEST_KEK),
            "TQDM_MININTERVAL": "0",  # draw every update: the commands here are quick
        },
        check=False,
    )
    assert (piped.returncode, piped.stderr) == (0, b"")


async def test_db_upgrade_shows_a_bar_per_migration_step(fresh_database_url: str) -> None:
    import asyncio

    from alembic.script import ScriptDirectory

    from ledger.store import migrate

    await asyncio.to_thread(migrate.downgrade, fresh_database_url, "base")
    code, shown = await asyncio.to_thread(
        _with_stderr_on_a_terminal, ["db", "upgrade"], fresh_database_url
    )
    assert code == 0, shown
    steps = len(list(ScriptDirectory.from_config(migrate.alembic_config("")).walk_revisions()))
    assert "upgrading schema" in shown and re.search(rf"{steps}/{steps} \[.*step/s\]", shown), shown


# -- keys new-kek and the KEK's errors -----------------------------------------------------------


def test_new_kek_writes_a_private_file_and_says_how_to_use_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "new" / "folders" / "kek"
    code, out, err = _run(["keys", "new-kek", "--out", str(path)], capsys)
    assert (code, err) == (0, "")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    for folder in (path.parent, path.parent.parent):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    kek = LocalKek.from_file(path)
    assert f"export SIGNOFF_KEK_FILE={path}" in out and kek.kek_id in out
    before = path.read_bytes()
    code, _, err = _run(["keys", "new-kek", "--out", str(path)], capsys)
    assert code == 2 and "exists already" in err and len(err.splitlines()) == 1
    assert path.read_bytes() == before


def test_new_kek_without_out_prints_the_key_for_a_pipe(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(["keys", "new-kek"], capsys)
    assert (code, err) == (0, "")  # stdout is not a terminal here: no warning
    assert len(base64.b64decode(out.strip(), validate=True)) == 32
    LocalKek.from_base64(out, "stdout")


@pytest.fixture
async def keyed_url(server_url: str) -> AsyncIterator[str]:
    async with scratch_database(server_url, prefix="signoff_test") as url:
        async with await Database.connect(url) as db:
            await KeyRing.open(db, LocalKek(TEST_KEK))
        yield url


@pytest.fixture
def no_kek(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("SIGNOFF_KEK", "SIGNOFF_KEK_FILE", "SIGNOFF_DATABASE_URL", "DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_a_wrong_kek_file_is_named_with_its_variable(
    keyed_url: str, no_kek: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wrong = tmp_path / "other-kek"
    wrong.write_text(base64.b64encode(os.urandom(32)).decode())
    no_kek.setenv("SIGNOFF_KEK_FILE", str(wrong))
    code, _, err = _run(["keys", "list", "--database-url", keyed_url], capsys)
    assert code == 2 and f"SIGNOFF_KEK_FILE={wrong}" in err
    assert LocalKek(TEST_KEK).kek_id in err and "signoff keys rewrap" in err


def test_a_kek_that_is_not_base64_names_the_variable_and_the_fix(
    keyed_url: str, no_kek: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    no_kek.setenv("SIGNOFF_KEK", "not a key")
    code, _, err = _run(["keys", "list", "--database-url", keyed_url], capsys)
    assert code == 2 and "SIGNOFF_KEK is not base64" in err and "signoff keys new-kek" in err
    no_kek.setenv("SIGNOFF_KEK", base64.b64encode(b"short").decode())
    code, _, err = _run(["keys", "list", "--database-url", keyed_url], capsys)
    assert code == 2 and "SIGNOFF_KEK holds 5 bytes" in err and "signoff keys new-kek" in err


def test_no_kek_on_a_database_without_keys_says_to_make_one(
    fresh_database_url: str, no_kek: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(
        ["keys", "rotate", "checkpoint", "--database-url", fresh_database_url], capsys
    )
    assert code == 2 and len(err.splitlines()) == 1
    assert "SIGNOFF_KEK_FILE" in err and "signoff keys new-kek" in err


async def test_retiring_a_retired_key_says_it_is_already_retired(keyed_url: str) -> None:
    async with await Database.connect(keyed_url) as db:
        ring = await KeyRing.open(db, LocalKek(TEST_KEK))
        old = ring.active_key_id(Purpose.CHECKPOINT)
        await ring.rotate(Purpose.CHECKPOINT)
        await ring.retire(old)
        with pytest.raises(KeyStateError, match="already retired"):
            await ring.retire(old)
        with pytest.raises(KeyStateError, match="not decrypt-only"):
            await ring.retire(ring.active_key_id(Purpose.CHECKPOINT))
