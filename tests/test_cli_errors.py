"""Every `signoff` command fails the way a good CLI does: one line on stderr, exit 2, never a
traceback, whatever is wrong (the server, the database, its schema, the KEK, the arguments).

The commands come from the parser itself, so a command added later cannot escape the table:
`COMMANDS` must name it, with minimal valid arguments and the conditions it depends on.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from adapters.cli import build_parser, main
from adapters.cli.arguments import all_parsers, leaf_parsers
from ledger.audit.digest import take_digest
from ledger.keys import KeyRing, LocalKek
from ledger.store import Database, migrate
from tests.support.scratch import scratch_database, with_database

from .support.processes import ROOT, TEST_KEK

DOWN, MISSING, BEHIND, NO_KEK, WRONG_KEK = (
    "server down",
    "missing database",
    "schema behind",
    "no KEK",
    "wrong KEK",
)
CONNECTING = frozenset({DOWN, MISSING})
DATABASE = CONNECTING | {BEHIND}
EVERYTHING = DATABASE | {NO_KEK, WRONG_KEK}
# What the one line must say for each condition: the cause, not just any error.
SAYS = {
    DOWN: "cannot connect",
    MISSING: "does not exist",
    BEHIND: "signoff db upgrade",
    NO_KEK: "SIGNOFF_KEK",
    WRONG_KEK: "SIGNOFF_KEK",
}


@dataclass(frozen=True)
class Command:
    """Minimal valid arguments ({digest}, {kek} and {tmp} are files the test makes) and the
    conditions that must stop the command. A command is exempt from a condition only where
    it does not depend on it (`db upgrade` repairs a schema behind; `keys new-kek` touches no
    database)."""

    args: tuple[str, ...] = ()
    fails_on: frozenset[str] = EVERYTHING


COMMANDS: dict[str, Command] = {
    "db upgrade": Command(fails_on=CONNECTING),
    "db downgrade": Command(fails_on=CONNECTING),
    "db current": Command(fails_on=CONNECTING),
    "db history record": Command(("--reason", "found"), fails_on=DATABASE),
    "db history settle": Command(("--reason", "settled"), fails_on=DATABASE),
    "keys init": Command(),
    "keys list": Command(),
    "keys rotate": Command(("checkpoint",)),
    "keys retire": Command(("ck-0000000000000000",)),
    "keys rewrap": Command(("--new-kek-file", "{kek}")),
    "keys export-public": Command(),
    "keys new-kek": Command(("--out", "{tmp}/kek"), fails_on=frozenset()),
    "ledger verify": Command(("--digest", "{digest}")),
    "ledger digest": Command(),
    "ledger integrate": Command(fails_on=DATABASE),
    "ledger tiles export": Command(("{tmp}/tiles",)),
    "ledger prove": Command(("1", "--digest", "{digest}"), fails_on=DATABASE),
    "ledger consistency": Command(("{digest}", "{digest}"), fails_on=DATABASE),
    "ledger calls": Command(fails_on=DATABASE),
    "ledger show": Command(("run-x", "call-x", "--reveal", "--by", "tester")),
    "ledger export": Command(fails_on=DATABASE),
    "ledger resolve": Command(("run-x", "call-x", "--succeeded", "--by", "tester")),
    # The log's origin is set in `environment`; the keys come from the journal, under the KEK.
    "ledger vkey": Command(),
    # A witness keeps its own key and state files; it asks the database nothing unless told to
    # (`--from-database`, after its files check out): tested in test_witness.
    "ledger witness init": Command(
        ("--key", "{tmp}/witness.key", "--name", "w.example/x"), fails_on=frozenset()
    ),
    "ledger witness vkey": Command(("--key", "{tmp}/witness.key"), fails_on=frozenset()),
    "ledger witness cosign": Command(
        (
            "--key",
            "{tmp}/w.key",
            "--state",
            "{tmp}/w.state",
            "--log-key",
            "l+0+AA",
            "--digest",
            "{digest}",
        ),
        fails_on=frozenset(),
    ),
    "approvals list": Command(fails_on=DATABASE),
    "approvals show": Command(("00000000-0000-0000-0000-000000000000", "--reveal")),
    "approvals decide": Command(
        ("00000000-0000-0000-0000-000000000000", "--approve", "--by", "tester")
    ),
    "approvals cancel": Command(("00000000-0000-0000-0000-000000000000", "--by", "tester")),
    # The directory needs no KEK: it holds no secrets.
    "reviewers add": Command(("tester", "--group", "leads"), fails_on=DATABASE),
    "reviewers list": Command(fails_on=DATABASE),
    "reviewers remove": Command(("tester",), fails_on=DATABASE),
    # Publishing signs (the reviewer-side KEK); reading and testing need the worker KEK only to
    # check the set's signature.
    "policy publish": Command(("--mode", "off", "--by", "tester")),
    "policy show": Command(),
    "policy list": Command(),
    "policy schema": Command(),
    "policy test": Command(
        ("--tool", "t", "--args", "{{}}", "--principal", "p", "--run", "r"), fails_on=DATABASE
    ),
    # Tokens hold no secret the KEK wraps (only hashes): they need no KEK.
    "tokens create": Command(("--reviewer", "tester"), fails_on=DATABASE),
    "tokens list": Command(fails_on=DATABASE),
    "tokens revoke": Command(("0000000000000000",), fails_on=DATABASE),
    # The doctor reports each of these conditions as a failed check, exit 1 (test_health).
    "doctor": Command(fails_on=frozenset()),
    # The service checks everything before it listens.
    "serve": Command(("--port", "0")),
    # The gateway checks the database and its keys before it starts an upstream.
    "mcp": Command(("--config", "{config}")),
    "checkpoints reencrypt": Command(),
    "checkpoints status": Command(),
    # The demo migrates the database it is given, so a schema behind is no error for it.
    "demo": Command(fails_on=EVERYTHING - {BEHIND}),
    # The embedded server's commands use no database URL and no KEK: an unusable home is their
    # failure, tested in test_embedded_cli.
    "embedded status": Command(fails_on=frozenset()),
    "embedded url": Command(fails_on=frozenset()),
    "embedded stop": Command(fails_on=frozenset()),
}

PARSER = build_parser()
LEAVES = {" ".join(words): parser for words, parser in leaf_parsers(PARSER)}
CASES = [(name, c) for name, command in COMMANDS.items() for c in sorted(command.fails_on)]


@pytest.fixture(autouse=True)
def logging_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """`main()` runs in this process here: it must not point the session's loggers at a
    captured stderr that closes after the test."""
    monkeypatch.setattr("adapters.cli.configure_logging", lambda *_, **__: None)


def test_every_command_is_in_the_table() -> None:
    missing = sorted(set(LEAVES) - set(COMMANDS))
    assert not missing, f"add these commands to COMMANDS (args and conditions): {missing}"
    assert not sorted(set(COMMANDS) - set(LEAVES)), "COMMANDS names commands that do not exist"


@dataclass(frozen=True)
class Places:
    """The databases of each condition and the files the arguments name."""

    urls: dict[str, str]
    files: dict[str, str]


@pytest.fixture(scope="module")
async def places(
    server_url: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Places]:
    folder = tmp_path_factory.mktemp("cli-errors")
    async with (
        scratch_database(server_url, prefix="signoff_test") as keyed,
        scratch_database(server_url, prefix="signoff_test") as behind,
    ):
        async with await Database.connect(keyed) as db:  # data keys under the test KEK
            digest = await take_digest(db, await KeyRing.open(db, LocalKek(TEST_KEK)))
        await _downgrade(behind, "-1")
        (folder / "digest.json").write_text(digest.to_json())
        (folder / "kek").write_text(base64.b64encode(os.urandom(32)).decode())
        gateway = "public_url = 'https://x.example'\n[upstreams.pay]\ncommand = 'false'\n"
        (folder / "gateway.toml").write_text(gateway)
        yield Places(
            urls={
                DOWN: "postgresql://postgres@127.0.0.1:1/signoff_down",
                MISSING: with_database(server_url, f"signoff_missing_{uuid.uuid4().hex[:8]}"),
                BEHIND: behind,
                NO_KEK: keyed,
                WRONG_KEK: keyed,
            },
            files={
                "digest": str(folder / "digest.json"),
                "kek": str(folder / "kek"),
                "config": str(folder / "gateway.toml"),
            },
        )


async def _downgrade(url: str, revision: str) -> None:
    import asyncio

    await asyncio.to_thread(migrate.downgrade, url, revision)


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """Only the command line names the database; the KEK is the test's unless changed; the log
    has an origin (so `ledger vkey` gets as far as the database)."""
    for name in ("SIGNOFF_DATABASE_URL", "DATABASE_URL", "SIGNOFF_KEK_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SIGNOFF_KEK", base64.b64encode(TEST_KEK).decode())
    monkeypatch.setenv("SIGNOFF_LOG_ORIGIN", "example.com/signoff/cli-errors")
    yield monkeypatch


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, list[str]]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err.splitlines()


def assert_one_line_error(code: int, err: list[str], says: str | None = None) -> None:
    assert code == 2, err
    assert len(err) == 1, err
    assert "Traceback" not in err[0]
    assert "unexpected" not in err[0], f"an untranslated error: {err[0]}"
    if says is not None:
        assert says in err[0], err[0]


@pytest.mark.parametrize(("name", "condition"), CASES, ids=[f"{n}: {c}" for n, c in CASES])
def test_a_command_under_a_bad_condition_fails_in_one_line(
    name: str,
    condition: str,
    places: Places,
    environment: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    if condition == NO_KEK:
        environment.delenv("SIGNOFF_KEK")
    elif condition == WRONG_KEK:
        environment.setenv("SIGNOFF_KEK", base64.b64encode(os.urandom(32)).decode())
    files = {**places.files, "tmp": str(tmp_path)}
    args = [a.format(**files) for a in COMMANDS[name].args]
    # The global option after the command: that works too.
    argv = [*name.split(), *args, "--database-url", places.urls[condition]]
    code, _, err = run(argv, capsys)
    assert_one_line_error(code, err, SAYS[condition])


# The check that fails under each condition: `signoff doctor` reports, exit 1, no error line.
DOCTOR_FAILS = {
    DOWN: "database",
    MISSING: "database",
    BEHIND: "schema",
    NO_KEK: "keys",
    WRONG_KEK: "keys",
}


@pytest.mark.parametrize("condition", sorted(EVERYTHING))
def test_the_doctor_reports_a_bad_condition_as_its_failed_check(
    condition: str,
    places: Places,
    environment: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if condition == NO_KEK:
        environment.delenv("SIGNOFF_KEK")
    elif condition == WRONG_KEK:
        environment.setenv("SIGNOFF_KEK", base64.b64encode(os.urandom(32)).decode())
    code, out, err = run(["doctor", "--json", "--database-url", places.urls[condition]], capsys)
    assert (code, err) == (1, [])
    failed = [c["name"] for c in json.loads(out)["checks"] if c["status"] == "fail"]
    assert failed[0] == DOCTOR_FAILS[condition], failed


DEEP_OBJECT = '{"a": ' * 10_000 + "1" + "}" * 10_000
DEEP_ARRAY = "[" * 10_000 + "]" * 10_000
BAD_VALUES = {
    "limit over integer": ["ledger", "calls", "--limit", "99999999999999999999"],
    "approvals limit over integer": ["approvals", "list", "--limit", "99999999999999999999"],
    "after over bigint": ["ledger", "export", "--after", "99999999999999999999"],
    "negative after": ["ledger", "export", "--after", "-1"],
    "position over bigint": ["ledger", "prove", "99999999999999999999", "--digest", "d.json"],
    "batch size over integer": ["checkpoints", "reencrypt", "--batch-size", "9" * 20],
    "argv not UTF-8": ["ledger", "calls", "--run", "\udcff"],
    "approvals argv not UTF-8": ["approvals", "list", "--run", "a\udcffb"],
    "NUL in a tool": ["ledger", "calls", "--tool", "re\x00fund"],
    "blank revealer": ["ledger", "show", "run", "call", "--reveal", "--by", " "],
    "blank reviewer": ["approvals", "decide", "id", "--approve", "--by", ""],
    "blank canceller": ["approvals", "cancel", "id", "--by", " "],
    "control characters in a reviewer": ["approvals", "decide", "id", "--approve", "--by", "a\x1b"],
    "JSON nested 10,000 deep": ["approvals", "decide", "id", "--edit", DEEP_OBJECT, "--by", "a"],
    "JSON arrays nested 10,000 deep": [
        "approvals",
        "decide",
        "id",
        "--edit",
        DEEP_ARRAY,
        "--by",
        "a",
    ],
    "NUL in edited JSON": ["approvals", "decide", "id", "--edit", '{"a": "\\u0000"}', "--by", "a"],
    "surrogate in edited JSON": [
        "approvals",
        "decide",
        "id",
        "--edit",
        '{"a": "\\ud800"}',
        "--by",
        "a",
    ],
    "edit not an object": ["approvals", "decide", "id", "--edit", "[1]", "--by", "a"],
    "NUL in a note": ["ledger", "resolve", "r", "c", "--failed", "--by", "a", "--note", "x\x00"],
    "surrogate in the database URL": ["db", "current", "--database-url", "postgresql://\udcff"],
    "unknown command": ["ledger", "nope"],
}


@pytest.mark.parametrize("argv", BAD_VALUES.values(), ids=BAD_VALUES.keys())
def test_a_bad_value_is_one_line_and_exit_2(
    argv: list[str], environment: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run([*argv, "--database-url", "postgresql://postgres@127.0.0.1:1/x"], capsys)
    assert_one_line_error(code, err)
    assert "cannot connect" not in err[0], "refused by the arguments, before any connection"
    assert out == ""


def _signoff(
    *args: bytes | str, stdout: int | None = subprocess.PIPE
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "adapters.cli", *args],
        cwd=ROOT,
        stdout=stdout,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
        check=False,
    )


def test_argv_bytes_that_are_not_utf8_are_refused_in_one_line() -> None:
    result = _signoff(
        b"ledger", b"calls", b"--run", b"\xff", b"--database-url", b"postgresql://h:1/x"
    )
    lines = result.stderr.decode(errors="replace").splitlines()
    assert result.returncode == 2, lines
    assert len(lines) == 1 and "not valid UTF-8" in lines[0], lines


@pytest.mark.parametrize("argv", [["--help"], ["ledger", "calls", "--json"]])
def test_a_closed_pipe_ends_the_command_quietly(argv: list[str], database_url: str) -> None:
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the command writes: `signoff ... | head`
    try:
        result = _signoff(*argv, "--database-url", database_url, stdout=write)
    finally:
        os.close(write)
    assert result.returncode in (0, 1)  # argparse itself ignores a failed write of --help
    assert result.stderr == b"", result.stderr.decode()


def _help_of(action: argparse.Action) -> list[str | None]:
    if isinstance(action, argparse._SubParsersAction):
        return [action.help, *(choice.help for choice in action._choices_actions)]
    return [action.help]


def test_every_argument_of_every_command_is_described() -> None:
    undescribed = [
        f"{' '.join(words) or 'signoff'}: {action.dest}"
        for words, parser in all_parsers(PARSER)
        for action in parser._actions
        if not all(text and text.strip() for text in _help_of(action))
    ]
    assert not undescribed


MAIN_COMMANDS = [
    "demo",
    "db upgrade",
    "ledger verify",
    "ledger digest",
    "ledger calls",
    "ledger show",
    "ledger export",
    "ledger resolve",
    "approvals decide",
    "approvals cancel",
    "keys rotate",
    "keys new-kek",
]


@pytest.mark.parametrize("name", MAIN_COMMANDS)
def test_the_main_commands_show_examples(name: str) -> None:
    parser = LEAVES[name]
    assert parser.epilog and "examples:" in parser.epilog
    assert "signoff " in parser.format_help().split("examples:")[1]  # kept as written


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_takes_json_and_global_options_after_it(name: str) -> None:
    args = [
        a.format(digest="d.json", kek="k", tmp="/tmp", config="g.toml") for a in COMMANDS[name].args
    ]
    words = name.split()
    after = PARSER.parse_args(
        [*words, *args, "--json", "--database-url", "postgresql://h/after", "--log-level", "info"]
    )
    assert after.json is True
    assert (after.database_url, after.log_level) == ("postgresql://h/after", "INFO")
    before = PARSER.parse_args(["--database-url", "postgresql://h/before", *words, *args])
    assert (before.database_url, before.log_level) == ("postgresql://h/before", "WARNING")


def test_keys_export_public_prints_the_key_document_with_json(
    database_url: str,
    ring: KeyRing,
    environment: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(
        ["keys", "export-public", "--json", "--database-url", database_url], capsys
    )
    assert (code, err) == (0, [])
    document = json.loads(out)
    assert document["signoff_public_keys"] == 1 and document["keys"]


def test_ledger_export_takes_json_and_prints_the_same_jsonl(
    database_url: str,
    ring: KeyRing,
    environment: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, plain, _ = run(["ledger", "export", "--database-url", database_url], capsys)
    code_json, as_json, err = run(
        ["ledger", "export", "--json", "--database-url", database_url], capsys
    )
    assert (code, code_json, err) == (0, 0, [])
    assert as_json == plain and all(json.loads(line) for line in plain.splitlines())
