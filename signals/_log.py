"""The library's logger: silent unless the application configures logging.

A library must not write to stdout or stderr on its own: an agent loop speaking a stdio
protocol (an MCP server, say) breaks on one stray line. structlog's defaults print every
event, so the library never logs through them: when the application has configured
structlog (``structlog.configure``, as ``workers.runtime.logging`` does), events go there
with their fields; otherwise they go to the standard ``logging`` module under the module's
name, where the package's ``NullHandler`` keeps them silent until the application adds a
handler (``logging.basicConfig(level=logging.DEBUG)`` shows them).

This module never imports structlog itself: ``import structlog`` loads ``structlog.dev``,
which imports rich (and pygments) when they are installed, and the library keeps its import
light. An application that configured structlog has imported it, so it is looked up in
``sys.modules`` when an event is logged.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

__all__ = ("get_logger",)

logging.getLogger("signals").addHandler(logging.NullHandler())
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def _configured_structlog() -> Any:
    """The structlog module when the application imported and configured it, else ``None``."""
    structlog = sys.modules.get("structlog")
    if structlog is None or not structlog.is_configured():
        return None
    return structlog


class LibraryLogger:
    """A structlog-shaped logger (``log.warning("event.name", key=value)``) that stays silent
    unless the application configured structlog or the standard ``logging`` module."""

    __slots__ = ("_name", "_std")

    def __init__(self, name: str) -> None:
        self._name = name
        self._std = logging.getLogger(name)

    def _emit(self, level: str, event: str, fields: dict[str, Any]) -> None:
        structlog = _configured_structlog()
        if structlog is not None:
            getattr(structlog.get_logger(self._name), level)(event, **fields)
        elif self._std.isEnabledFor(_LEVELS[level]):
            details = " ".join(f"{key}={value!r}" for key, value in fields.items())
            self._std.log(_LEVELS[level], "%s %s", event, details)

    def debug(self, event: str, **fields: Any) -> None:
        """Log at debug level."""
        self._emit("debug", event, fields)

    def info(self, event: str, **fields: Any) -> None:
        """Log at info level."""
        self._emit("info", event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        """Log at warning level."""
        self._emit("warning", event, fields)

    def error(self, event: str, **fields: Any) -> None:
        """Log at error level."""
        self._emit("error", event, fields)


def get_logger(name: str) -> LibraryLogger:
    """The logger of one library module (``get_logger(__name__)``)."""
    return LibraryLogger(name)
