"""The worker's cache of lane tracking: saves round trips, never decides correctness."""

from __future__ import annotations

from collections import OrderedDict

from signals._util import Client, lindex
from signals.codec import FIELD, decode_signal
from signals.keys import Keys
from signals.lane import LaneTracking
from signals.replay import iter_signals, materialise

__all__ = ("TrackingCache",)


class TrackingCache:
    """Each lane's tracking and the text after its last signal (the next delta's base),
    cached in the worker.

    A bounded LRU. A cached tracking is used without reading Redis; the commit script's
    compare-and-set on the processed write version rejects it if another worker moved
    the lane meanwhile, and the lane is then recomputed from a fresh read. A miss reads
    the tracking, and the text from the lane's last signal ``value`` (or rebuilds it from
    the last snapshot when values are left out of deltas). Workers stay stateless: the
    cache only saves round trips.
    """

    def __init__(self, redis: Client, keys: Keys, capacity: int) -> None:
        self.redis = redis
        self.keys = keys
        self.capacity = capacity
        self._lru: OrderedDict[str, LaneTracking] = OrderedDict()

    def get(self, lane: str) -> LaneTracking | None:
        """The cached tracking of a lane, if any."""
        tracking = self._lru.get(lane)
        if tracking is not None:
            self._lru.move_to_end(lane)
        return tracking

    def remember(self, lane: str, tracking: LaneTracking) -> None:
        """Cache a lane's tracking (with its text) after a successful commit."""
        self._lru[lane] = tracking
        self._lru.move_to_end(lane)
        while len(self._lru) > self.capacity:
            self._lru.popitem(last=False)

    def forget(self, lane: str) -> None:
        """Drop a lane (its tracking moved under us)."""
        self._lru.pop(lane, None)

    async def values_for(self, versions: dict[str, int]) -> dict[str, str]:
        """The text at the given signal version of each lane (lanes at version 0 have none).

        A lane whose version is no longer in its stream is left out: another worker moved
        it on (and trimmed) between the tracking read and this one, so the caller's
        tracking is stale and the lane must be read again.
        """
        out: dict[str, str] = {}
        missing: list[tuple[str, int]] = []
        for lane, version in versions.items():
            if version == 0:
                continue
            cached = self._lru.get(lane)
            if cached is not None and cached.version == version:
                out[lane] = cached.value
            else:
                missing.append((lane, version))
        if missing:
            for (lane, version), last in zip(missing, await self._last_values(missing), strict=True):
                value = last if last is not None else await self._rebuild(lane, version)
                if value is not None:
                    out[lane] = value
        return out

    async def _last_values(self, lanes: list[tuple[str, int]]) -> list[str | None]:
        """Each lane's last signal ``value`` when that signal is at the given version."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for lane, _ in lanes:
                pipe.xrevrange(self.keys.signals(lane), count=1)
            replies = await pipe.execute()
        values: list[str | None] = []
        for (_, version), entries in zip(lanes, replies, strict=True):
            signal = decode_signal(entries[0][1][FIELD]) if entries else None
            values.append(signal.value if signal is not None and signal.version == version else None)
        return values

    async def _rebuild(self, lane: str, version: int) -> str | None:
        """The text at ``version``, materialised from the last snapshot at or before it."""
        last_snapshot = await lindex(self.redis, self.keys.snapshots(lane), -1) or "-"
        for start in dict.fromkeys((last_snapshot, "-")):  # the version may precede the last snapshot
            chain = [item async for item in iter_signals(self.redis, self.keys, lane, start=start)]
            for item in materialise(chain, verify=False):
                if item.signal.version == version:
                    return item.value
        return None
