"""Optional parts of Signoff and the extra that installs each, checked before they are imported.

A plain `pip install signoff` gives the journal, keys, tool calls, approvals, audit, the CLI and
the offline verifier. Agent frameworks, Dex and the embedded server come with extras, so a
missing one is named in one line instead of surfacing as a `ModuleNotFoundError` deep inside.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable

from ledger.errors import SignoffError

__all__ = [
    "DEX",
    "LANGGRAPH",
    "MCP",
    "OPENAI_AGENTS",
    "PYDANTIC_AI",
    "SERVE",
    "MissingExtra",
    "missing_modules",
    "require_extra",
]

# The modules each extra provides (import names, not distribution names).
LANGGRAPH = ("langgraph", "langgraph.checkpoint.postgres", "langchain", "langchain_core", "psycopg")
DEX = ("dex",)
OPENAI_AGENTS = ("agents",)
SERVE = ("fastapi", "uvicorn", "jwt", "httpx", "prometheus_client")
MCP = ("mcp", *SERVE)
PYDANTIC_AI = ("pydantic_ai",)


class MissingExtra(SignoffError, ImportError):
    """An optional part was used without the extra that installs it."""

    def __init__(self, what: str, extra: str, missing: list[str]) -> None:
        super().__init__(f"{what} needs the {extra} extra: pip install 'signoff[{extra}]'")
        self.what, self.extra, self.missing = what, extra, missing


def _installed(module: str) -> bool:
    try:
        # find_spec imports the parents of a dotted name, never the module itself.
        return importlib.util.find_spec(module) is not None
    except ImportError:  # a parent is missing (or a finder refuses the name)
        return False


def missing_modules(modules: Iterable[str]) -> list[str]:
    """The modules of `modules` that cannot be imported here."""
    return [m for m in modules if not _installed(m)]


def require_extra(what: str, extra: str, modules: Iterable[str]) -> None:
    """Raise `MissingExtra` (one line: what needs which extra, and the pip command) unless every
    module of `modules` is installed."""
    missing = missing_modules(modules)
    if missing:
        raise MissingExtra(what, extra, missing)
