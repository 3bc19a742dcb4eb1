"""Retention settings in users' terms: retain_signals, retain_age, the deprecated
unknown variables (no network)."""

from __future__ import annotations

from datetime import timedelta

import pydantic
import pytest
from structlog.testing import capture_logs

from signals.core.retention import DEFAULT_RETAIN_SIGNALS, Retention, format_duration, parse_duration
from signals.errors import InvalidInputError
from workers.runtime.settings import Settings
from workers.runtime.worker import consumer_options


@pytest.mark.parametrize(("text", "ms"), [("90s", 90_000), ("30m", 1_800_000), ("12h", 43_200_000),
                                          ("7d", 604_800_000), ("2w", 1_209_600_000), ("500ms", 500),
                                          ("3600", 3_600_000), ("1.5h", 5_400_000), (" 0 ", 0)])
def test_durations_parse_with_or_without_a_unit(text: str, ms: int) -> None:
    """A number with a unit, or seconds without one."""
    assert parse_duration(text) == timedelta(milliseconds=ms)


@pytest.mark.parametrize("text", ["", "soon", "5 parsecs", "-5s", "1e3", "10y", "9999999999w"])
def test_bad_durations_name_the_text(text: str) -> None:
    """Anything else is refused, naming what was given."""
    with pytest.raises(InvalidInputError, match=r"duration|100 years"):
        parse_duration(text)


def test_retention_from_the_settings_and_in_words() -> None:
    """The default is 30 signals and no age; an age is carried in ms and described in its unit."""
    assert consumer_options(Settings()).retention == Retention(DEFAULT_RETAIN_SIGNALS, 0) == Retention()
    retention = consumer_options(Settings(retain_signals=5, retain_age="1d")).retention
    assert retention == Retention(5, 86_400_000)
    assert retention.describe() == ("at least 5 signals per lane and everything younger than 1d, "
                                    "trimmed at snapshot boundaries")
    assert format_duration(timedelta(minutes=90)) == "90m" and format_duration(timedelta(milliseconds=1500)) == "1500ms"


def test_retain_age_from_the_environment_and_its_refusals(monkeypatch: pytest.MonkeyPatch) -> None:
    """WM_SIGNALS_RETAIN_AGE takes the same texts (and ISO 8601); 0 means none; negative,
    longer than 100 years or not a duration is a validation error naming the setting."""
    monkeypatch.setenv("WM_SIGNALS_RETAIN_AGE", "12h")
    assert Settings().retain_age == timedelta(hours=12)
    assert Settings(retain_age="P1D").retain_age == timedelta(days=1)
    assert Settings(retain_age="0").retain_age is None and Settings(retain_age=0).retain_age is None
    for bad in ("-P1D", "soon", "P99999D", "200000w"):
        with pytest.raises(pydantic.ValidationError, match="retain_age"):
            Settings(retain_age=bad)
    with pytest.raises(pydantic.ValidationError, match="retain_signals"):
        Settings(retain_signals=0)


def test_an_unknown_variable_is_warned_of(monkeypatch: pytest.MonkeyPatch) -> None:
    """A WM_SIGNALS_* variable that names no setting (keep_snapshots is none) is warned of."""
    monkeypatch.setenv("WM_SIGNALS_KEEP_SNAPSHOTS", "4")
    with capture_logs() as logs:
        Settings().warn_unknown_variables()
    assert [e["variable"] for e in logs if e["event"] == "settings.unknown_variable"] == ["WM_SIGNALS_KEEP_SNAPSHOTS"]
