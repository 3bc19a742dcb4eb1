"""A read-only health report of a namespace: partitions, consumers, pending, lag, dead letters."""

from __future__ import annotations

from dataclasses import dataclass, field

from redis import exceptions as redis_exc

from signals.streams.client import Client
from signals.streams.keys import GROUP, Keys
from signals.streams.progress import lane_versions

__all__ = ("ConsumerInfo", "PartitionInfo", "Report", "inspect")


@dataclass(frozen=True, slots=True)
class ConsumerInfo:
    """One consumer of a partition's group."""

    name: str
    pending: int
    idle_ms: int


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition."""

    partition: int
    stream_length: int
    pending: int
    lag: int
    lanes: int
    dead_letters: int
    consumers: tuple[ConsumerInfo, ...]


@dataclass(frozen=True, slots=True)
class Report:
    """The whole namespace."""

    partitions: tuple[PartitionInfo, ...]
    busiest: tuple[tuple[str, int], ...] = field(default=())

    @property
    def totals(self) -> dict[str, int]:
        """Sums over partitions."""
        return {name: sum(getattr(p, name) for p in self.partitions)
                for name in ("stream_length", "pending", "lag", "lanes", "dead_letters")}


async def inspect(redis: Client, keys: Keys, *, top: int = 10, scan: int = 10_000) -> Report:
    """Build the report. ``lag`` counts lanes whose worker is behind their document;
    ``busiest`` ranks up to ``scan`` lanes per partition by document version (writes)."""
    parts = []
    busiest: list[tuple[str, int]] = []
    for p in range(keys.partitions):
        stream = keys.writes(p)
        length = await redis.xlen(stream)
        consumers: list[ConsumerInfo] = []
        pending = 0
        try:
            pending = int((await redis.xpending(stream, GROUP))["pending"])
            consumers = [ConsumerInfo(c["name"], int(c["pending"]), int(c["idle"]))
                         for c in await redis.xinfo_consumers(stream, GROUP)]
        except redis_exc.ResponseError:  # no group yet: no worker ever started
            pass
        lanes_key = keys.lanes(p)
        lane_count = await redis.scard(lanes_key)
        lag = 0
        cursor, seen = 0, 0
        while True:
            cursor, found = await redis.sscan(lanes_key, cursor, count=1000)
            lanes = [str(lane) for lane in found]
            for lane, (doc, done) in zip(lanes, await lane_versions(redis, keys, lanes), strict=True):
                lag += done < doc
                busiest.append((lane, doc))
            busiest = sorted(busiest, key=lambda x: -x[1])[:top]
            seen += len(lanes)
            if cursor == 0 or seen >= scan:
                break
        parts.append(PartitionInfo(p, length, pending, lag, lane_count,
                                   await redis.xlen(keys.dead_letters(p)), tuple(consumers)))
    return Report(tuple(parts), tuple(busiest))
