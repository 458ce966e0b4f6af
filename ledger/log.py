"""Structured logging: JSON lines when not on a terminal, readable lines on one.

Bind run, call and approval ids (`log.bind(run_id=...)`); never log arguments, results or keys.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

__all__ = ["configure_logging", "get_logger"]


def configure_logging(level: str = "INFO", *, json: bool | None = None) -> None:
    """Configure structlog once for the process (CLI and workers call this at start)."""
    as_json = not sys.stderr.isatty() if json is None else json
    renderer: Any = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelNamesMapping()[level]),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )


def get_logger(name: str, **bound: Any) -> structlog.stdlib.BoundLogger:
    """A logger for `name` with the given ids bound."""
    # A lazy proxy: configuration made after import (by the CLI) still applies.
    logger: structlog.stdlib.BoundLogger = structlog.get_logger(name, **bound)
    return logger
