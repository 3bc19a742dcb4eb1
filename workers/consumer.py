"""The worker loop: read write events, compute signals, commit and acknowledge atomically.

One batch is three round trips whatever its size: XREADGROUP over every partition, one
pipeline reading the tracking of the batch's lanes, one pipeline with one commit script
per partition (signal XADD + tracking update + XACK, atomic per lane). A lane whose
tracking moved under us (another worker committed it first) is recomputed from the fresh
tracking; an event at or below the processed write version is acknowledged without a
signal, so each write version yields at most one signal and a crash yields no gap.

Poison events (bad JSON, wrong types, a lane that does not exist or does not belong to
the partition) go to the partition's dead-letter stream at once, with the reason; an
event whose processing raises anything else is retried and dead-lettered after
``max_attempts``. Stale pending entries of dead consumers are reclaimed with XAUTOCLAIM.
"""

from __future__ import annotations

import os
import socket
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, cast

import msgspec
import structlog
from redis import exceptions as redis_exc
from redis.asyncio.cluster import RedisCluster

from signals._util import Client, lua, now_iso, queue_script
from signals.codec import FIELD, decode_write, encode_json
from signals.errors import GroupMissingError
from signals.keys import GROUP, Keys
from signals.lane import LaneOptions, LaneTracking, advance
from signals.models import DeadLetter, WriteEvent
from workers.cache import TrackingCache

__all__ = ("BatchStats", "Consumer", "ConsumerOptions", "default_consumer_name")

log = structlog.get_logger(__name__)
_MAX_RECOMPUTE = 50
_LANE_PREFIX = {"resource": "r:", "thread": "t:"}


def default_consumer_name() -> str:
    """``<hostname>-<pid>``: unique per process, stable for its lifetime."""
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True, slots=True)
class ConsumerOptions:
    """How a worker reads and commits."""

    lane: LaneOptions = field(default_factory=LaneOptions)
    batch: int = 500
    block_ms: int = 100
    keep_snapshots: int = 3
    claim_idle_ms: int = 15_000
    max_attempts: int = 3
    dead_letter_maxlen: int = 100_000
    tracking_cache: int = 20_000


@dataclass(slots=True)
class BatchStats:
    """Counters a worker accumulates (and the demo and benchmarks print)."""

    events: int = 0
    signals: int = 0
    snapshots: int = 0
    deltas: int = 0
    skipped: int = 0
    dead_letters: int = 0
    conflicts: int = 0

    def add(self, other: BatchStats) -> None:
        """Accumulate another batch's counters."""
        for name in self.__slots__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


RawEntry = tuple[str, str, dict[str, str] | None]


@dataclass(slots=True)
class _Prefetch:
    """Streams to read ahead in the next commit's round trip, and what that read returned."""

    streams: list[str]
    entries: list[RawEntry] | None = None


@dataclass(slots=True)
class _Entry:
    partition: int
    entry_id: str
    event: WriteEvent


@dataclass(slots=True)
class _LaneCommit:
    """What one lane contributes to its partition's commit script."""

    lane: str
    expected: int
    entries: list[_Entry]
    signals: list[str] = field(default_factory=list)
    snapshots: list[int] = field(default_factory=list)
    acks: list[str] = field(default_factory=list)
    stats: BatchStats = field(default_factory=BatchStats)
    final: LaneTracking = field(default_factory=LaneTracking)

    def payload(self) -> list[Any]:
        """The lane's item in the commit script's JSON argument."""
        return [self.expected, *self.final.to_args(), self.signals, self.snapshots, self.acks]


class Consumer:
    """One worker's consumer over every partition of a namespace."""

    def __init__(self, redis: Client, keys: Keys, options: ConsumerOptions, name: str) -> None:
        self.redis = redis
        self.keys = keys
        self.options = options
        self.name = name
        self.stats = BatchStats()
        self._commit = redis.register_script(lua("commit"))
        self._read = redis.register_script(lua("read_tracking"))
        self._cache = TrackingCache(redis, keys, options.tracking_cache)
        self._dead = redis.register_script(lua("dead_letter"))
        self._stream_partition = {s: p for p, s in enumerate(keys.all_writes())}

    async def ensure_groups(self) -> None:
        """Create the consumer group on every partition stream (from the start; idempotent)."""
        for stream in self.keys.all_writes():
            try:
                await self.redis.xgroup_create(stream, GROUP, id="0", mkstream=True)
            except redis_exc.ResponseError as e:
                if "BUSYGROUP" not in str(e):
                    raise

    def stream_groups(self) -> list[list[str]]:
        """The partition streams one XREADGROUP may read together: all of them on one
        server, one each on a Redis Cluster (a command's keys must share a slot there)."""
        streams = list(self.keys.all_writes())
        if isinstance(self.redis, RedisCluster):
            return [[stream] for stream in streams]
        return [streams]

    async def read_batch(
        self, streams: list[str] | None = None, cursors: dict[str, str] | None = None
    ) -> list[RawEntry]:
        """Read new entries from ``streams`` (default: every partition), or, with ``cursors``,
        this consumer's own pending entries after each stream's cursor (no blocking)."""
        wanted = cursors or dict.fromkeys(streams or self.keys.all_writes(), ">")
        try:
            reply = await self.redis.xreadgroup(
                GROUP, self.name, wanted,  # type: ignore[arg-type]
                count=self.options.batch,
                block=None if cursors else self.options.block_ms,
            )
        except redis_exc.ResponseError as e:
            if "NOGROUP" in str(e):
                raise GroupMissingError(f"consumer group {GROUP} vanished: {e}") from e
            raise
        return self._flatten(reply)

    @staticmethod
    def _flatten(reply: object) -> list[RawEntry]:
        typed = cast(list[tuple[str, list[tuple[str, dict[str, str] | None]]]], reply or [])
        return [(stream, entry_id, fields) for stream, entries in typed for entry_id, fields in entries]

    async def drain_pending(self, streams: list[str] | None = None) -> BatchStats:
        """Process this consumer's own pending entries once (after a restart or reconnect)."""
        total = BatchStats()
        cursors = dict.fromkeys(streams or self.keys.all_writes(), "0")
        while cursors:
            raw = await self.read_batch(cursors=cursors)
            seen = {stream: entry_id for stream, entry_id, _ in raw}
            cursors = {stream: seen[stream] for stream in cursors if stream in seen}
            if raw:
                total.add(await self.process(raw))
        return total

    async def reclaim(self) -> BatchStats:
        """XAUTOCLAIM entries idle longer than ``claim_idle_ms`` from any consumer, and process them."""
        total = BatchStats()
        for stream in self.keys.all_writes():
            start = "0-0"
            while True:
                reply = await self.redis.xautoclaim(
                    stream, GROUP, self.name, self.options.claim_idle_ms, start_id=start,
                    count=self.options.batch,
                )
                start, claimed = reply[0], reply[1]
                if claimed:
                    log.info("worker.reclaimed", stream=stream, count=len(claimed))
                    total.add(await self.process([(stream, eid, f) for eid, f in claimed]))
                if start in ("0-0", "0"):
                    break
        return total

    async def process_and_read(self, raw: list[RawEntry], streams: list[str] | None) -> list[RawEntry]:
        """Process entries, and read what waits next on ``streams`` in the same round trip.

        Under load a batch then costs one round trip, not two: a non-blocking XREADGROUP
        rides in the commit pipeline. Returns the entries read (empty: nothing was waiting,
        or nothing was committed; the caller then blocks on :meth:`read_batch`). The
        entries are pending for this consumer from then on, as with any read.
        """
        prefetch = _Prefetch(streams) if streams else None
        await self.process(raw, prefetch=prefetch)
        return (prefetch.entries if prefetch else None) or []

    async def process(self, raw: list[RawEntry], *, prefetch: _Prefetch | None = None) -> BatchStats:
        """Process entries: decode, dead-letter poison, compute and commit the rest."""
        stats = BatchStats(events=len(raw))
        entries: list[_Entry] = []
        for stream, entry_id, fields in raw:
            partition = self._stream_partition[stream]
            if not fields:  # deleted while pending: nothing to do but acknowledge
                await self.redis.xack(stream, GROUP, entry_id)
                continue
            try:
                event = self._decode(fields, partition)
            except (KeyError, ValueError, msgspec.DecodeError, msgspec.ValidationError) as e:
                await self._dead_letter(partition, entry_id, fields, f"poison: {e!r}", 1)
                stats.dead_letters += 1
                continue
            entries.append(_Entry(partition, entry_id, event))
        for _ in range(_MAX_RECOMPUTE):
            if not entries:
                break
            entries = await self._compute_and_commit(entries, stats, prefetch)
        else:
            log.warning("worker.contention", lanes_left=len({e.event.lane for e in entries}))
        self.stats.add(stats)
        return stats

    def _decode(self, fields: dict[str, str], partition: int) -> WriteEvent:
        """Decode and check one write event; raises on poison."""
        event = decode_write(fields[FIELD])
        owner = event.resource_id if event.scope == "resource" else event.thread_id
        if not owner or event.lane != _LANE_PREFIX[event.scope] + owner:
            raise ValueError(f"lane {event.lane!r} does not match its scope and ids")
        if self.keys.partition(event.lane) != partition:
            raise ValueError(f"lane {event.lane!r} does not belong to partition {partition}")
        return event

    async def _compute_and_commit(
        self, entries: list[_Entry], stats: BatchStats, prefetch: _Prefetch | None = None
    ) -> list[_Entry]:
        """One pass: read the lanes' tracking, compute their signals, commit; returns the
        entries of lanes another worker advanced meanwhile (to recompute)."""
        by_lane: dict[str, list[_Entry]] = defaultdict(list)
        for entry in entries:
            by_lane[entry.event.lane].append(entry)
        tracking, exists = await self._read_tracking(by_lane)
        now = now_iso()
        per_partition: dict[int, list[_LaneCommit]] = defaultdict(list)
        retry: list[_Entry] = []
        for lane, lane_entries in by_lane.items():
            lane_entries.sort(key=lambda e: e.event.version)
            if not exists[lane]:
                for entry in lane_entries:
                    await self._dead_letter(entry.partition, entry.entry_id, {FIELD: encode_json(entry.event)},
                                            f"poison: unknown lane {lane!r} (no document)", 1)
                    stats.dead_letters += 1
                continue
            if lane not in tracking:  # another worker moved the lane while we read it
                stats.conflicts += 1
                retry.extend(lane_entries)
                continue
            commit = await self._compute_lane(lane, tracking[lane], lane_entries, now)
            per_partition[lane_entries[0].partition].append(commit)
        return retry + await self._commit_all(per_partition, stats, prefetch)

    async def _read_tracking(
        self, by_lane: dict[str, list[_Entry]]
    ) -> tuple[dict[str, LaneTracking], dict[str, bool]]:
        """Tracking (with the delta base) and document existence per lane: from the cache,
        else one read script per partition. A lane that moved on between the two reads
        has no tracking in the result (the caller recomputes it)."""
        tracking: dict[str, LaneTracking] = {}
        partitions: dict[int, list[str]] = defaultdict(list)
        for lane, lane_entries in by_lane.items():
            cached = self._cache.get(lane)
            if cached is not None:
                tracking[lane] = cached
            else:
                partitions[lane_entries[0].partition].append(lane)
        exists = dict.fromkeys(tracking, True)
        if not partitions:
            return tracking, exists
        async with self.redis.pipeline(transaction=False) as pipe:
            for group in partitions.values():
                await queue_script(pipe, self._read,
                                   [k for lane in group for k in (self.keys.track(lane), self.keys.doc(lane))], [])
            replies = await pipe.execute()
        fields: dict[str, list[Any]] = {}
        for group, flat in zip(partitions.values(), replies, strict=True):
            for n, lane in enumerate(group):
                fields[lane] = flat[6 * n : 6 * n + 6]
                exists[lane] = bool(fields[lane][5])
        values = await self._cache.values_for({lane: int(f[0] or 0) for lane, f in fields.items() if f[5]})
        for lane, f in fields.items():
            if int(f[0] or 0) == 0 or lane in values:
                tracking[lane] = LaneTracking.from_fields(f[:5], values.get(lane, ""))
        return tracking, exists

    async def _compute_lane(
        self, lane: str, tracking: LaneTracking, lane_entries: list[_Entry], now: str
    ) -> _LaneCommit:
        commit = _LaneCommit(lane, tracking.write_version, lane_entries)
        for entry in lane_entries:
            try:
                tracking, signal = advance(tracking, entry.event, self.options.lane, now=now)
            except Exception as e:  # noqa: BLE001 - classified: counted, retried, then dead-lettered
                await self._failed(entry, e, commit.stats)
                continue
            commit.acks.append(entry.entry_id)
            if signal is None:
                commit.stats.skipped += 1
                continue
            snapshot = signal.mode == "snapshot"
            commit.signals.append(encode_json(signal))
            commit.snapshots.append(int(snapshot))
            commit.stats.signals += 1
            commit.stats.snapshots += snapshot
            commit.stats.deltas += not snapshot
        commit.final = tracking
        return commit

    async def _commit_all(
        self, per_partition: dict[int, list[_LaneCommit]], stats: BatchStats, prefetch: _Prefetch | None = None
    ) -> list[_Entry]:
        """Commit every partition's lanes; returns the entries of conflicted lanes."""
        retry: list[_Entry] = []
        if not per_partition:
            return retry
        order = list(per_partition.items())
        results = await self._run_commits(order, prefetch)
        for (_, commits), conflicts in zip(order, results, strict=True):
            conflicted = {int(i) - 1 for i in conflicts}
            for position, c in enumerate(commits):
                if position in conflicted:
                    stats.conflicts += 1
                    retry.extend(c.entries)
                    self._cache.forget(c.lane)
                else:
                    stats.add(c.stats)
                    self._cache.remember(c.lane, c.final)
        return retry

    async def _run_commits(
        self, order: list[tuple[int, list[_LaneCommit]]], prefetch: _Prefetch | None
    ) -> list[list[int]]:
        """One commit script per partition in one pipeline, plus the read-ahead (once) when
        asked; returns each script's conflicted lane positions."""
        reading = prefetch is not None and prefetch.entries is None
        async with self.redis.pipeline(transaction=False) as pipe:
            for partition, commits in order:
                script_keys = [self.keys.writes(partition)]
                for c in commits:
                    script_keys += [self.keys.track(c.lane), self.keys.signals(c.lane), self.keys.snapshots(c.lane)]
                payload = encode_json([c.payload() for c in commits])
                await queue_script(pipe, self._commit, script_keys, [GROUP, self.options.keep_snapshots, payload])
            if prefetch is not None and reading:
                pipe.xreadgroup(GROUP, self.name, dict.fromkeys(prefetch.streams, ">"),
                                count=self.options.batch)
            results = await pipe.execute(raise_on_error=False)
        if prefetch is not None and reading:
            ahead = results.pop()
            # a failed read-ahead (NOGROUP, say) is left for the next blocking read to report
            prefetch.entries = [] if isinstance(ahead, Exception) else self._flatten(ahead)
        for result in results:
            if isinstance(result, Exception):
                raise result
        return cast(list[list[int]], results)

    async def _failed(self, entry: _Entry, error: Exception, stats: BatchStats) -> None:
        """Count a processing failure; dead-letter the event after ``max_attempts``."""
        attempts = int(await self.redis.hincrby(self.keys.failures(entry.partition), entry.entry_id, 1))
        log.warning("worker.event_failed", entry_id=entry.entry_id, attempts=attempts, error=repr(error))
        if attempts >= self.options.max_attempts:
            await self._dead_letter(entry.partition, entry.entry_id, {FIELD: encode_json(entry.event)},
                                    f"failed {attempts} times: {error!r}", attempts)
            stats.dead_letters += 1

    async def _dead_letter(
        self, partition: int, entry_id: str, fields: dict[str, str], error: str, attempts: int
    ) -> None:
        letter = DeadLetter(stream=self.keys.writes(partition), entry_id=entry_id, fields=fields,
                            error=error, attempts=attempts, at=now_iso())
        await self._dead(
            keys=[self.keys.writes(partition), self.keys.dead_letters(partition), self.keys.failures(partition)],
            args=[GROUP, entry_id, encode_json(letter), self.options.dead_letter_maxlen],
        )
        log.warning("worker.dead_lettered", partition=partition, entry_id=entry_id, error=error)
