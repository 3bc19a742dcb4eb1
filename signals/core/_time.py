"""Timestamps (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ("now_iso",)


def now_iso() -> str:
    """UTC now as ISO-8601 with milliseconds and a ``Z``, like JavaScript's ``toISOString``."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
