"""configure_logging(): the only structlog.configure call (JSON off a tty, console on one)."""

from __future__ import annotations

import logging
import sys

import structlog

__all__ = ("configure_logging",)


def configure_logging(fmt: str = "auto", level: str = "info") -> None:
    """Configure structlog for a worker process, writing to stderr."""
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
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
