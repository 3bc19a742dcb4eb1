"""How much of a lane's signal history is kept, in users' terms. Pure.

A lane's signal stream keeps **at least** the last :attr:`Retention.signals` signals and,
with :attr:`Retention.age_ms`, every signal younger than that. Trimming happens only at a
snapshot boundary (the worker's commit script, ``signals/streams/lua/commit.lua``, trims
the stream to the newest retained snapshot that leaves both floors intact), so the
oldest retained signal is always a snapshot and a replay from it rebuilds every retained
version. Retention is a floor, not a cap: a lane is trimmed only when its worker appends
a snapshot (an idle lane keeps what it has; trimming on every delta would add reads to
every commit), so with chains of K signals (``snapshot_every``) it holds between
``signals`` and ``signals + 2K - 2`` signals, about ``signals + K - 1`` on average, more
with an age (the oldest retained snapshot is the newest at least that old, so an age
keeps at most one chain older than itself).

Why the default is 30: a subscriber's bootstrap needs only the stream's last chain (at
most ``snapshot_every`` signals, 20 by default), which trimming at snapshot boundaries
always keeps; 30 is that chain plus a debugging horizon of ten more changes, so a person
debugging a lane sees at least its last 30 signals whatever the policy (under
``compact`` a small document gets a snapshot for nearly every change, which made the
earlier rule, three snapshot chains, keep as few as three signals), and a subscriber up
to a chain behind resumes by reading instead of re-bootstrapping. It is also what the
earlier rule cost in memory where it kept the most: a lane written for long, with whole
chains of 20, holds about 30 + 19 = 49 signals on average, as three chains of 20 did
(41 to 60), so the change costs no Redis memory there (``bench/bench_memory.py``
measures the bytes; each signal stores the document's text, twice for a snapshot:
``contents`` and ``value``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta

from signals.errors import InvalidInputError

__all__ = ("DEFAULT_RETAIN_SIGNALS", "MAX_AGE_MS", "Retention", "format_duration", "parse_duration")

DEFAULT_RETAIN_SIGNALS = 30
"""Signals kept per lane at least (see the module's docstring for why)."""

_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
#: The longest age accepted: 100 years (stream ids are milliseconds since the epoch).
MAX_AGE_MS = 100 * 365 * 86_400_000


def parse_duration(text: str) -> timedelta:
    """A duration such as ``90s``, ``30m``, ``12h``, ``7d``, ``2w``, ``500ms`` or a plain
    number of seconds; ``0`` means none.

    Raises:
        InvalidInputError: anything else (names the text).
    """
    match = _DURATION.fullmatch(text)
    if match is None:
        raise InvalidInputError(f"{text[:40]!r} is not a duration (e.g. 90s, 30m, 12h, 7d, 2w, 500ms)")
    ms = float(match.group(1)) * _UNIT_MS[match.group(2) or "s"]
    if ms > MAX_AGE_MS:
        raise InvalidInputError(f"{text[:40]!r} is longer than 100 years")
    return timedelta(milliseconds=ms)


def format_duration(age: timedelta) -> str:
    """``age`` in the largest unit that divides it exactly (``1d``, ``90m``, ``1500ms``)."""
    ms = round(age.total_seconds() * 1000)
    for unit in ("w", "d", "h", "m", "s"):
        if ms and ms % _UNIT_MS[unit] == 0:
            return f"{ms // _UNIT_MS[unit]}{unit}"
    return f"{ms}ms"


@dataclass(frozen=True, slots=True)
class Retention:
    """A lane's retention: at least ``signals`` signals, and every signal younger than
    ``age_ms`` milliseconds (0: no age floor). See the module's docstring."""

    signals: int = DEFAULT_RETAIN_SIGNALS
    age_ms: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.signals, bool) or not isinstance(self.signals, int) or self.signals < 1:
            raise InvalidInputError(f"retain_signals must be an integer >= 1, not {self.signals!r}")
        if isinstance(self.age_ms, bool) or not isinstance(self.age_ms, int) or not 0 <= self.age_ms <= MAX_AGE_MS:
            raise InvalidInputError(f"retain_age must be 0 to 100 years in ms, not {self.age_ms!r}")

    @classmethod
    def of(cls, signals: int, age: timedelta | None) -> Retention:
        """From the worker's settings (``retain_signals``, ``retain_age``)."""
        return cls(signals, 0 if age is None else round(age.total_seconds() * 1000))

    def describe(self) -> str:
        """In users' terms, e.g. ``at least 30 signals per lane and everything younger than 1d``."""
        text = f"at least {self.signals} signals per lane"
        if self.age_ms:
            text += f" and everything younger than {format_duration(timedelta(milliseconds=self.age_ms))}"
        return text + ", trimmed at snapshot boundaries"
