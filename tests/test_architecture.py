"""Dependencies point one way, `adapters -> approvals -> ledger`, and each agent framework is
imported only under its adapter. Read from every module's imports with `ast`, lazy imports
inside functions included."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from .support.processes import ROOT

PACKAGES = ("ledger", "approvals", "adapters", "migrations")
# Third-party packages that only an adapter (and tests and benchmarks) may import.
FRAMEWORKS = (
    "langgraph",
    "langchain",
    "langchain_core",
    "dex",
    "psycopg",
    "psycopg_pool",
    "fastapi",
    "starlette",
    "uvicorn",
    "jwt",
    "httpx",
    "prometheus_client",
    "mcp",
    "mcp_types",
)
FRAMEWORK_HOMES = (
    "adapters/langgraph",
    "adapters/dex",
    "adapters/welt",
    "adapters/demo",
    "adapters/http",
    "adapters/mcp",
)


def modules(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


def imported(path: Path) -> set[str]:
    """Every module `path` imports, absolute names (relative imports resolved)."""
    package = path.relative_to(ROOT).with_suffix("").parts[:-1]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = list(package[: len(package) - node.level + 1]) if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            names.add(module)
    return names


def offenders(folders: tuple[str, ...], forbidden: tuple[str, ...]) -> list[str]:
    return [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in modules(*folders)
        for name in sorted(imported(path))
        if name.split(".")[0] in forbidden
    ]


def test_the_reader_sees_relative_and_lazy_imports() -> None:
    probe = imported(ROOT / "ledger" / "calls" / "service.py")
    assert {"ledger.calls.records", "ledger.store", "ledger.journal"} <= probe
    assert "ledger.store.settings" in imported(ROOT / "ledger" / "store" / "config.py")  # lazy


def test_the_ledger_imports_neither_approvals_nor_adapters() -> None:
    assert offenders(("ledger",), ("approvals", "adapters")) == []


def test_approvals_import_no_adapter() -> None:
    assert offenders(("approvals",), ("adapters",)) == []


def test_migrations_import_only_the_ledger() -> None:
    assert offenders(("migrations",), ("approvals", "adapters")) == []


# Alembic loads `migrations/` by path and the wheel ships it inside `ledger.store`: an installed
# Signoff has no `migrations` package (an application may have its own), so nothing imports one,
# not even by name at run time.
_MIGRATIONS_BY_NAME = re.compile(r"[\"']migrations\.")


def test_nothing_imports_the_migrations_folder_as_a_package() -> None:
    folders = (*PACKAGES, "tests", "bench")
    found = offenders(folders, ("migrations",))
    found += [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in modules(*folders)
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _MIGRATIONS_BY_NAME.search(line)
    ]
    assert found == []


def test_agent_frameworks_are_imported_only_under_their_adapters() -> None:
    found = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in modules(*PACKAGES)
        if not str(path.relative_to(ROOT)).startswith(FRAMEWORK_HOMES)
        for name in sorted(imported(path))
        if name.split(".")[0] in FRAMEWORKS
    ]
    assert found == []


# Imports cannot see SQL: the ledger must not name approvals' tables or streams either.
_APPROVALS_NAMES = re.compile(
    r"\b(FROM|JOIN|INTO|UPDATE|TABLE)\s+approval"  # SQL on approvals' tables
    r"|f?[\"']approval:"  # an approval's stream id, built by hand
    r"|'(approved|edited)'"  # approvals' statuses
)


def test_the_ledger_source_names_no_approvals_table_or_stream() -> None:
    assert _APPROVALS_NAMES.search("FROM tool_calls c LEFT JOIN approvals a ON")
    assert not _APPROVALS_NAMES.search("streams (`approval:<id>`, `call:<run>/<call id>`)")
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in modules("ledger")
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _APPROVALS_NAMES.search(line) and not line.lstrip().startswith("#")
    ]
    assert found == []


# The runtime every adapter shares imports no framework: a new adapter (an HTTP service) can
# use it without installing another one's extra.
_RUNTIME_MAY_IMPORT = {
    "__future__",
    "collections",
    "dataclasses",
    "datetime",
    "typing",
    "approvals",
    "ledger",
}


def test_the_adapters_runtime_imports_only_the_ledger_and_approvals() -> None:
    found = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in modules("adapters/runtime")
        for name in sorted(imported(path))
        if name.split(".")[0] not in _RUNTIME_MAY_IMPORT and not name.startswith("adapters.runtime")
    ]
    assert found == []


# The task run that consumes an approval, `<run>/<call id>`, is built by the runtime alone.
_TASK_RUN_ID = re.compile(r"f[\"']\{[^}]+\}/\{[^}]+\}[\"']")


def test_adapters_build_no_task_run_id_of_their_own() -> None:
    assert _TASK_RUN_ID.search("task_run = f\"{run_id}/{tool_call['id']}\"")
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in modules("adapters")
        if not str(path.relative_to(ROOT)).startswith("adapters/runtime")
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _TASK_RUN_ID.search(line)
    ]
    assert found == []


# Adapters may import each other only along these arrows; every other adapter-to-adapter import
# fails. `extras` (naming a missing extra), `terminal` (escaping for a screen) and `runtime` (the
# one flow of a tool call) are shared by all; the rest:
_ADAPTER_ARROWS = {
    # The command line is the outermost layer: it serves, checkpoints, and runs the demo.
    "cli": {"demo", "http", "langgraph", "mcp"},
    # The demo runs a LangGraph agent and decides through the HTTP service, on the library's
    # public API; it never borrows the CLI's insides (the CLI imports the demo, not back).
    "demo": {"http", "langgraph"},
    # The MCP gateway checks its clients' tokens and listens as the HTTP service does.
    "mcp": {"http"},
    # Dex sessions and Welt threads are LangGraph graphs underneath.
    "dex": {"langgraph"},
    "welt": {"langgraph"},
}
_SHARED_BY_ADAPTERS = {"extras", "terminal", "runtime"}


def adapter_of(path_or_module: str) -> str:
    """`adapters/cli/demo.py` or `adapters.cli.demo` -> `cli`; a top-level module's own name."""
    parts = path_or_module.removesuffix(".py").replace("/", ".").split(".")
    return parts[1] if len(parts) > 1 else ""


def adapter_arrows() -> set[tuple[str, str]]:
    """Every (importer, imported) pair of adapters, read from the imports."""
    arrows: set[tuple[str, str]] = set()
    for path in modules("adapters"):
        source = adapter_of(str(path.relative_to(ROOT)))
        for name in imported(path):
            if name.startswith("adapters.") and (target := adapter_of(name)) != source:
                arrows.add((source, target))
    return arrows


def forbidden_arrows(arrows: set[tuple[str, str]]) -> list[str]:
    return sorted(
        f"adapters.{source} imports adapters.{target}"
        for source, target in arrows
        if target not in _SHARED_BY_ADAPTERS and target not in _ADAPTER_ARROWS.get(source, set())
    )


def test_adapters_import_each_other_only_along_the_allowed_arrows() -> None:
    arrows = adapter_arrows()
    assert ("cli", "demo") in arrows  # the reader sees the lazy import of `signoff demo`
    assert forbidden_arrows(arrows) == []


def test_the_demo_importing_the_cli_would_fail() -> None:
    # The import the demo once had: a cycle with the CLI's lazy import of the demo.
    assert forbidden_arrows({("demo", "cli"), ("cli", "demo")}) == [
        "adapters.demo imports adapters.cli"
    ]


def test_the_allowed_arrows_have_no_cycle() -> None:
    def reaches(start: str, goal: str, seen: frozenset[str] = frozenset()) -> bool:
        return any(
            nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt}))
            for nxt in _ADAPTER_ARROWS.get(start, set())
        )

    assert [a for a in _ADAPTER_ARROWS if reaches(a, a)] == []


def private_imports(path: Path) -> list[str]:
    """What `path` imports from Signoff's packages that is private: a `_name`, or a module
    with a `_` segment (relative imports inside its own package are its own business)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
            continue
        if node.module.split(".")[0] not in ("ledger", "approvals", "adapters"):
            continue
        parts = node.module.split(".")
        names = [alias.name for alias in node.names]
        found += [f"{node.module}.{n}" for n in names if n.startswith("_")]
        found += [node.module] if any(p.startswith("_") for p in parts) else []
    return found


def test_the_demo_uses_only_the_public_api() -> None:
    assert private_imports(ROOT / "tests" / "test_group_commit.py")  # the reader sees them
    found = {
        str(path.relative_to(ROOT)): names
        for path in modules("adapters/demo")
        if (names := private_imports(path))
    }
    assert found == {}
