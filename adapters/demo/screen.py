"""What the demo shows as it goes, and how it fails."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from adapters.terminal import safe
from ledger import SignoffError

__all__ = ["STEPS", "WIDTH", "DemoFailed", "Screen"]

STEPS = 5
WIDTH = 88  # step times are right-aligned to this column


class DemoFailed(SignoffError):
    """A step of the demo could not be done."""


@dataclass
class Screen:
    """Progress on stdout, one line per step and per thing a worker reports; silent with
    `--json`."""

    quiet: bool
    step_no: int = 0

    def line(self, text: str = "") -> None:
        """Values from the model and the database are escaped for the terminal here."""
        if not self.quiet:
            print(safe(text), flush=True)

    def notice(self, text: str) -> None:
        """A line a person must see even with `--json` (then on stderr, so that stdout stays one
        JSON document)."""
        print(safe(text), flush=True, file=sys.stderr if self.quiet else sys.stdout)

    def step(self, text: str, seconds: float | None = None) -> None:
        self.step_no += 1
        head = f"[{self.step_no}/{STEPS}] {text}"
        if seconds is not None:
            head = f"{head:<{WIDTH - 7}}{seconds:>5.1f} s"
        self.line(head)

    def detail(self, label: str, text: str) -> None:
        self.line(f"      {label:<9} {text}")

    def done(self, text: str, seconds: float) -> None:
        self.line(f"{'      ' + text:<{WIDTH - 7}}{seconds:>5.1f} s")
