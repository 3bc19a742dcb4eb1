"""Key builders that must agree with each other."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from signals.streams.keys import Keys


@given(lane=st.text(min_size=1, max_size=40), partitions=st.integers(1, 4096))
def test_worker_keys_are_the_three_lane_keys(lane: str, partitions: int) -> None:
    """The commit script's per-lane keys, built together, are the ones built one by one."""
    keys = Keys("ns", partitions)
    assert keys.worker_keys(lane) == (keys.track(lane), keys.signals(lane), keys.snapshots(lane))
