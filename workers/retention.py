"""The worker's retention settings: ``retain_signals``, ``retain_age``, and the deprecated
``keep_snapshots`` (see :mod:`signals.core.retention` for what retention means).

``keep_snapshots`` (N snapshot chains per lane) was the retention rule before: under the
``compact`` policy a small document gets a snapshot for nearly every change, so three
chains could be three signals. It is still accepted, so existing deployments keep
starting, and maps to ``retain_signals = keep_snapshots * snapshot_every``: the number of
signals it kept for a document whose chains were whole, now kept whatever the policy.
An explicit ``retain_signals`` wins over it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Protocol

from signals.core.retention import parse_duration
from signals.errors import InvalidInputError

__all__ = ("map_keep_snapshots", "retention_age")


class _RetentionSettings(Protocol):
    retain_signals: int
    keep_snapshots: int | None
    snapshot_every: int

    @property
    def model_fields_set(self) -> set[str]: ...


def retention_age(value: object) -> object:
    """``retain_age`` before pydantic's own parsing: ``None``, empty or zero mean none; a
    text (``90s``, ``30m``, ``12h``, ``7d``, ``2w``, ``500ms``, or seconds: ``3600``) is
    parsed here, except ISO 8601 (``P1D``), which pydantic's ``timedelta`` parses as it
    does numbers of seconds.

    Raises:
        ValueError: a text that is not a duration (pydantic reports it, naming the setting).
    """
    if isinstance(value, str) and not value.strip().upper().startswith(("P", "-")):
        try:
            value = parse_duration(value) if value.strip() else None
        except InvalidInputError as e:
            raise ValueError(str(e)) from e
    if isinstance(value, int | float) and not isinstance(value, bool) and value == 0:
        return None
    if isinstance(value, timedelta) and not value:
        return None
    return value


def map_keep_snapshots(settings: _RetentionSettings) -> dict[str, object] | None:
    """Apply the deprecated ``keep_snapshots`` when ``retain_signals`` was not given; the
    fields of the warning to log (what it became, or that ``retain_signals`` overrode it),
    ``None`` when it was not given. The caller logs it once logging is configured."""
    if settings.keep_snapshots is None:
        return None
    if "retain_signals" in settings.model_fields_set:
        return {"setting": "keep_snapshots", "ignored_for": "retain_signals", "retain_signals": settings.retain_signals}
    settings.retain_signals = settings.keep_snapshots * settings.snapshot_every
    return {"setting": "keep_snapshots", "keep_snapshots": settings.keep_snapshots,
            "becomes": f"retain_signals={settings.retain_signals} (keep_snapshots x snapshot_every)"}
