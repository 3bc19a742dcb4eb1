"""configure_logging(): the only structlog.configure call (JSON off a tty, console on one)."""

from __future__ import annotations

import logging
import sys

import structlog

__all__ = ("configure_logging",)


def configure_logging(fmt: str = "auto", level: str = "info", *, force: bool = False) -> None:
    """Configure structlog for a process, writing to stderr.

    A second call is a no-op unless ``force``: the first configuration of a process (a
    test session's, an embedding application's) wins over the CLI's defaults.
    """
    if structlog.is_configured() and not force:
        return
    console = fmt == "console" or (fmt == "auto" and sys.stderr.isatty())
    renderer: structlog.types.Processor = (
        structlog.dev.ConsoleRenderer() if console else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        # one write per line (message and newline together): with PYTHONUNBUFFERED=1, as container
        # images often set, print() wrote them apart and the lines of a worker's processes interleaved
        logger_factory=structlog.WriteLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
