"""configure_logging(): the only structlog.configure call (JSON off a tty, console on one).

Console lines go to an operator's terminal, and their fields carry ids and texts that
callers chose (a resource id may hold U+202E RIGHT-TO-LEFT OVERRIDE, U+009B CSI, U+200B,
ESC): :class:`EscapingConsoleRenderer` writes every character that is not printable as its Python
escape (``\\u202e``, ``\\x9b``, ``\\x1b``, ``\\n``) in the event name, every key and every
value, so nothing a caller sent can move the cursor, recolour, reorder or
split a line. A traceback (``exception``) keeps its line breaks and nothing else. JSON
lines need no such step: the encoder escapes every character outside ASCII.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

__all__ = ("EscapingConsoleRenderer", "configure_logging", "escape_text")

#: Fields whose line breaks are layout (a formatted traceback), not content.
_MULTILINE = frozenset({"exception", "stack"})


def escape_text(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` with each character that is not printable (``str.isprintable``: controls,
    format characters such as bidi overrides and zero-width spaces, separators other than
    the space, unassigned code points) written as its escape; ``keep_newlines`` keeps
    ``\\n``."""
    if text.isprintable():
        return text
    return "".join(
        c if c.isprintable() or (keep_newlines and c == "\n") else c.encode("unicode_escape").decode("ascii")
        for c in text
    )


#: Fields the console renderer prints with ``str`` (not through its value formatting).
_AS_TEXT = frozenset({"event", "timestamp", "level", "logger", "logger_name"}) | _MULTILINE


class EscapingConsoleRenderer(structlog.dev.ConsoleRenderer):
    """structlog's console renderer, every field escaped (see the module docstring): keys
    and the fields it prints as text before rendering, values in its value formatting
    (after its own ``repr``, which leaves a string without spaces or quotes as it is)."""

    def _repr(self, val: Any) -> str:
        return escape_text(super()._repr(val))

    def __call__(self, logger: Any, name: str, event_dict: MutableMapping[str, Any]) -> str:
        safe: dict[str, Any] = {}
        for key, value in event_dict.items():
            text = key if isinstance(key, str) else repr(key)
            as_text = text in _AS_TEXT and isinstance(value, str)
            safe[escape_text(text)] = escape_text(value, keep_newlines=text in _MULTILINE) if as_text else value
        return super().__call__(logger, name, safe)


def configure_logging(fmt: str = "auto", level: str = "info", *, force: bool = False) -> None:
    """Configure structlog for a process, writing to stderr.

    A second call is a no-op unless ``force``: the first configuration of a process (a
    test session's, an embedding application's) wins over the CLI's defaults.
    """
    if structlog.is_configured() and not force:
        return
    console = fmt == "console" or (fmt == "auto" and _isatty(sys.stderr))
    renderers: list[structlog.types.Processor] = (
        [EscapingConsoleRenderer()] if console else [structlog.processors.JSONRenderer()]
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            *renderers,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        # one write per line (message and newline together): with PYTHONUNBUFFERED=1, as container
        # images often set, print() wrote them apart and the lines of a worker's processes interleaved
        logger_factory=structlog.WriteLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )


def _isatty(stream: object) -> bool:
    """Whether ``stream`` is a terminal (a closed or missing one is not)."""
    try:
        return bool(stream is not None and stream.isatty())  # type: ignore[attr-defined]
    except (ValueError, OSError):
        return False
