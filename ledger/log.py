"""Structured logging that stays silent until the application configures it.

The library logs through structlog onto standard-library loggers named `signoff.<module>`, which
carry a `NullHandler` (the standard practice for libraries): nothing is printed, to stdout or
stderr, until the application adds a handler (`logging.basicConfig(...)` shows our WARNING lines
and above, with the bound ids as record attributes). The `signoff` CLI and the worker processes it
starts call `configure_logging`: JSON lines (or readable lines on a terminal) on stderr.

Bind run, call and approval ids (`log.bind(run_id=...)`); never log arguments, results or keys.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

__all__ = ["ROOT_LOGGER", "configure_logging", "get_logger"]

ROOT_LOGGER = "signoff"

# Without a handler of its own, a record from a library logger would reach logging's "last
# resort" handler and be printed to stderr even though nobody configured logging.
logging.getLogger(ROOT_LOGGER).addHandler(logging.NullHandler())

# The library's own chain ends by handing the event to the standard-library logger: the event
# text as the message and the bound ids as record attributes, whatever handler renders them.
_LIBRARY_PROCESSORS: list[Any] = [
    structlog.stdlib.filter_by_level,  # first: a disabled level costs one isEnabledFor call
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.render_to_log_kwargs,
]


def get_logger(name: str, **bound: Any) -> structlog.stdlib.BoundLogger:
    """A logger for module `name` (under `signoff.`) with the given ids bound."""
    logger: structlog.stdlib.BoundLogger = structlog.wrap_logger(
        logging.getLogger(f"{ROOT_LOGGER}.{name}"),
        processors=_LIBRARY_PROCESSORS,
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    ).bind(**bound)
    return logger


class _SignoffHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler `configure_logging` installs; marked so a second call replaces it."""


def configure_logging(level: str = "INFO", *, json: bool | None = None) -> None:
    """For applications (the CLI, worker processes): print Signoff's logs on stderr.

    JSON lines when stderr is not a terminal (or `json=True`), readable lines on one. Only the
    `signoff` loggers are configured; the root logger and other libraries are left alone.
    """
    as_json = not sys.stderr.isatty() if json is None else json
    renderer: Any = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer()
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            structlog.stdlib.ExtraAdder(),  # the bound ids, from the record's attributes
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
        ],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            renderer,
        ],
    )
    handler = _SignoffHandler(sys.stderr)
    handler.setFormatter(formatter)
    logger = logging.getLogger(ROOT_LOGGER)
    for old in [h for h in logger.handlers if isinstance(h, _SignoffHandler)]:
        logger.removeHandler(old)
    logger.addHandler(handler)
    logger.setLevel(logging.getLevelNamesMapping()[level.upper()])
    logger.propagate = False  # printed once, here, not again by a root handler
