"""Full-jitter exponential backoff, and the same bounded in time for reconnect loops.

:func:`full_jitter` is the delay before retry number ``attempt``: uniform between 0 and
``first_s * 2**attempt``, capped at ``cap_s`` (AWS's "full jitter": retrying clients
spread out instead of returning together). :class:`Backoff` counts the failures of one
episode (from the first failure to the next success) and says when it has lasted longer
than its timeout.

It does not sleep, log, classify errors or raise: the caller decides which errors are
worth a retry, what giving up means (usually :class:`~signals.errors.RedisUnavailableError`
with its own message) and which event it logs.
"""

from __future__ import annotations

import random
import time

__all__ = ("Backoff", "full_jitter")


def full_jitter(attempt: int, *, first_s: float, cap_s: float) -> float:
    """A random delay in ``[0, min(cap_s, first_s * 2**attempt)]`` (``attempt`` from 0)."""
    return random.uniform(0, min(cap_s, first_s * 2**attempt))


class Backoff:
    """Full-jitter exponential backoff bounded in time.

    Call :meth:`next_delay` after each failure and :meth:`ok` after a success. The first
    failure after a success starts the clock; once failures have gone on for longer than
    ``timeout_s``, :meth:`next_delay` returns ``None``: give up.

    Args:
        timeout_s: how long failures may go on before giving up.
        first_s: the bound of the first delay; it doubles with each failure.
        cap_s: the largest bound.
    """

    def __init__(self, timeout_s: float, *, first_s: float = 0.05, cap_s: float = 2.0) -> None:
        self.timeout_s = timeout_s
        self.first_s = first_s
        self.cap_s = cap_s
        self.failing_since: float | None = None
        self.attempt = 0

    def ok(self) -> None:
        """A success: the next failure starts a new episode (first delay, clock restarted)."""
        self.failing_since = None
        self.attempt = 0

    def next_delay(self) -> float | None:
        """Count a failure: the seconds to wait before retrying, or ``None`` when the
        failures have lasted longer than ``timeout_s``."""
        now = time.monotonic()
        if self.failing_since is None:
            self.failing_since = now
        if now - self.failing_since > self.timeout_s:
            return None
        delay = full_jitter(self.attempt, first_s=self.first_s, cap_s=self.cap_s)
        self.attempt += 1
        return delay
