"""The reconnect backoff: full-jitter delays that double to a cap, bounded in time."""

from __future__ import annotations

import time

from signals.streams.backoff import Backoff, full_jitter


def test_full_jitter_stays_under_the_doubling_bound_and_its_cap() -> None:
    """Delay ``n`` lies in ``[0, min(cap, first * 2**n)]``."""
    for attempt in range(12):
        bound = min(2.0, 0.05 * 2**attempt)
        for _ in range(200):
            assert 0 <= full_jitter(attempt, first_s=0.05, cap_s=2.0) <= bound


def test_delays_double_per_failure_up_to_the_cap() -> None:
    """Each failure of an episode raises the bound of the next delay (0.05 s doubling to 2 s)."""
    backoff = Backoff(60.0)
    for attempt in range(10):
        delay = backoff.next_delay()
        assert delay is not None and 0 <= delay <= min(2.0, 0.05 * 2**attempt)
    assert backoff.attempt == 10


def test_ok_starts_a_new_episode() -> None:
    """After a success the next failure gets the first, shortest delay again."""
    backoff = Backoff(60.0)
    for _ in range(5):
        backoff.next_delay()
    backoff.ok()
    assert backoff.attempt == 0 and backoff.failing_since is None
    delay = backoff.next_delay()
    assert delay is not None and delay <= 0.05


def test_gives_up_once_failures_outlast_the_timeout() -> None:
    """Failing for longer than ``timeout_s`` since the first failure returns ``None``."""
    backoff = Backoff(0.01)
    assert backoff.next_delay() is not None
    time.sleep(0.02)
    assert backoff.next_delay() is None


def test_a_success_restarts_the_clock() -> None:
    """Time spent failing before a success does not count against the next episode."""
    backoff = Backoff(0.01)
    backoff.next_delay()
    time.sleep(0.02)
    backoff.ok()
    assert backoff.next_delay() is not None
