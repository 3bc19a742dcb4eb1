"""The worker's cache of lane tracking: saves round trips, never decides correctness."""

from __future__ import annotations

from typing import Any, cast

import msgspec
from redis import exceptions as redis_exc

from signals.core.codec import FIELD, decode_signal
from signals.core.lane import LaneTracking
from signals.core.lru import LRU
from signals.core.models import Signal
from signals.core.wire import MAX_VERSION
from signals.errors import WmSignalsError
from signals.streams.client import Client, lindex
from signals.streams.keys import Keys
from signals.streams.redis_errors import is_whole_server
from signals.streams.replay import Materialised, iter_signals, materialise

__all__ = ("RECENT", "TrackingCache", "rebuilt_from")


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
        self._lru: LRU[str, LaneTracking] = LRU(capacity)

    def get(self, lane: str) -> LaneTracking | None:
        """The cached tracking of a lane, if any."""
        return self._lru.get(lane)

    def remember(self, lane: str, tracking: LaneTracking) -> None:
        """Cache a lane's tracking (with its text) after a successful commit."""
        self._lru.put(lane, tracking)

    def compacted(self, lane: str, version: int) -> None:
        """A lane at ``version`` was compacted to one snapshot at its tail's id (see
        :mod:`workers.engine.compaction`): its cached tracking, if at that version, counts
        its signals since the snapshot from there."""
        cached = self._lru.peek(lane)
        if cached is not None and cached.version == version:
            self._lru.put(lane, msgspec.structs.replace(cached, mode="snapshot", since_snapshot=1))

    def forget(self, lane: str) -> None:
        """Drop a lane (its tracking moved under us)."""
        self._lru.discard(lane)

    async def values_for(self, lanes: dict[str, tuple[int, str, int]]) -> tuple[dict[str, str], dict[str, int]]:
        """The text at the given signal version of each lane, given as ``(version, tail id,
        signals since the snapshot)`` (the tracking's ``v``, ``tail`` and ``n``), and the
        lanes whose tracking names its stream's last entry but at another version than that
        signal's (lane -> the signal's version: the tracking's ``v`` is wrong).

        One round trip reads each lane's last ``n`` entries (at most :data:`RECENT`): the
        last signal's ``value``, or (a delta stored without it: ``omit_delta_value``) the
        chain from the snapshot before it rebuilds the text.

        A lane is left out of the texts when its text cannot be established from its stream
        (a junk or foreign tail, a trimmed or deleted stream): the caller then emits a
        snapshot, which needs no base. Nothing read is trusted: the last entry counts only
        if it is the one the tracking names, decodes as a signal of this lane at that version.
        """
        out: dict[str, str] = {}
        misnumbered: dict[str, int] = {}
        missing: list[tuple[str, int, str, int]] = []
        for lane, (version, tail, since) in lanes.items():
            if version == 0:
                continue
            cached = self._lru.peek(lane)
            if cached is not None and cached.version == version and cached.value is not None:
                out[lane] = cached.value
            else:
                missing.append((lane, version, tail, since))
        if not missing:
            return out, misnumbered
        async with self.redis.pipeline(transaction=False) as pipe:
            for lane, _, _, since in missing:
                pipe.xrevrange(self.keys.signals(lane), count=min(max(since, 1), RECENT))
            replies = await pipe.execute(raise_on_error=False)
        for (lane, version, tail, _), entries in zip(missing, replies, strict=True):
            named = isinstance(entries, list) and entries and entries[0][0] == tail
            last = _signal_of(lane, entries[0]) if named else None
            if last is not None and last.version != version:
                misnumbered[lane] = last.version
                continue
            value = _value_from(lane, version, tail, last, entries)
            if value is None:  # not the tracked signal, or a chain longer than what was read
                value = await self._rebuild(lane, version)
            if value is not None:
                out[lane] = value
        return out, misnumbered

    async def _rebuild(self, lane: str, version: int) -> str | None:
        """The text at ``version``, materialised from the last snapshot at or before it;
        ``None`` when the stream cannot rebuild it (junk, trimmed, of another type)."""
        try:
            last_snapshot = await lindex(self.redis, self.keys.snapshots(lane), -1) or "-"
            for start in dict.fromkeys((last_snapshot, "-")):  # the version may precede the last snapshot
                chain = [item async for item in iter_signals(self.redis, self.keys, lane, start=start)]
                for item in materialise(chain, verify=False):
                    if item.signal.version == version:
                        return item.value
        except (WmSignalsError, redis_exc.ResponseError) as e:
            if is_whole_server(e):
                raise
        return None

    async def last_version(self, lane: str, *, scan: int = 50) -> int | None:
        """The highest version among the last ``scan`` decodable signals of the lane's
        stream; ``None`` when there is none (empty, missing, junk or another type)."""
        try:
            entries = cast(list[Any], await self.redis.xrevrange(self.keys.signals(lane), count=scan))
        except redis_exc.ResponseError as e:
            if is_whole_server(e):
                raise
            return None
        versions = [s.version for s in (_signal_of(lane, entry) for entry in entries) if s is not None]
        return max(versions, default=None)


#: How many of a stream's last entries :meth:`TrackingCache.values_for` reads at most to find the
#: snapshot a lane's last delta builds on (a chain is at most ``snapshot_every`` long, 20 by default).
RECENT = 32


def _value_from(lane: str, version: int, tail: str, last: Signal | None, entries: Any) -> str | None:
    """The text after ``last`` (the stream's last entry, at ``version``): its own ``value``,
    or (a delta stored without it) rebuilt from the entries read before it."""
    if last is None or last.value is not None:
        return None if last is None else last.value
    item = rebuilt_from(lane, version, tail, entries)
    return item.value if item is not None else None


def rebuilt_from(lane: str, version: int, tail: str, entries: Any) -> Materialised | None:
    """The signal at ``version`` with its text, from a stream's last entries (XREVRANGE's
    reply: newest first, starting at ``tail``), rebuilt from the newest snapshot among
    them; ``None`` when they cannot tell."""
    if not isinstance(entries, list) or not entries or entries[0][0] != tail:
        return None
    chain: list[tuple[str, Signal]] = []
    for entry in entries:
        signal = _signal_of(lane, entry)
        if signal is None:
            return None
        chain.append((entry[0], signal))
        if signal.mode == "snapshot":
            break
    else:
        return None
    try:
        items = list(materialise(reversed(chain), verify=False, lane=lane))
    except WmSignalsError:
        return None
    return items[-1] if items and items[-1].signal.version == version else None


def _signal_of(lane: str, entry: Any) -> Signal | None:
    """A stream entry as a signal of ``lane``, or ``None`` if it is anything else."""
    try:
        signal = decode_signal(entry[1][FIELD])
    except (KeyError, IndexError, TypeError, msgspec.DecodeError, msgspec.ValidationError):
        return None
    if signal.lane != lane or not 1 <= signal.version <= MAX_VERSION:
        return None
    return signal

