"""Progress bars for long commands: on stderr, only when it is a terminal and `--json` is not
given, so that pipes, files and machines see nothing but the result.

The library reports progress through a plain callback (`progress(n)`: n more items done); this
module turns it into a tqdm bar with counts, rate and time left.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from .output import wants_json

__all__ = ["Progress", "progress_bar", "shows_progress"]

Progress = Callable[[int], None]


def shows_progress(args: argparse.Namespace) -> bool:
    return not wants_json(args) and sys.stderr.isatty()


def _nothing(_: int) -> None:
    pass


@contextmanager
def progress_bar(
    args: argparse.Namespace, description: str, *, total: int | None = None, unit: str = "event"
) -> Iterator[Progress]:
    """A callback that advances a bar by `n`; a no-op when no bar is shown."""
    if not shows_progress(args):
        yield _nothing
        return
    from tqdm import tqdm  # only a terminal needs it

    with tqdm(
        total=total, desc=description, unit=unit, file=sys.stderr, dynamic_ncols=True, leave=False
    ) as bar:

        def advance(n: int) -> None:
            bar.update(n)

        yield advance
