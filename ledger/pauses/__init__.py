"""Paused runs: the sealed state of agent runs that wait for approvals, kept server-side and
resumed once by any worker (`store`; SQL in `sql/`)."""

from .store import PausedRun, PausedRuns, PauseTaken, UnknownPause

__all__ = ["PauseTaken", "PausedRun", "PausedRuns", "UnknownPause"]
