"""Compaction of idle lanes: an idle lane keeps its document, its tracking and one snapshot.

A lane whose last signal is older than ``compact_after`` (and than ``retain_age``, whose
promise compaction keeps) needs nothing of its history to bootstrap an agent: one
snapshot of its last version does. The worker's maintenance compacts such lanes a few
at a time (:meth:`Compactor.run_pass`, at most ``batch`` lanes looked at per pass,
partition after partition with ``SSCAN`` over the lane registry, so a whole sweep is
spread over many passes), through one script call per partition (``compact.lua``):
per lane, atomically on its slot, and only while its tracking and signal stream are
what the worker read; a commit in between leaves the lane as it is.

When the last signal is a snapshot, the stream keeps it alone. When it is a delta, the
worker rebuilds its text from the stream (checked against its cacheKey), and the stream
keeps, in the delta's place (its id), a snapshot of the same version: no version and no
entry id is added, so a commit planned before the compaction still finds the stream ending
where it expects, a reader past the delta finds nothing new, and a reader behind it starts
from the snapshot. The tracking's ``cv`` field records the version the compacted history starts
at (``replay`` names it). A lane written again continues from the snapshot.

Nothing read is trusted: a lane name that is not a lane of this partition, a tracking
or stream that does not parse, or a delta chain that does not rebuild to its cacheKey
leaves the lane as it is (counted as skipped).

A command the worker's ACL refuses (an operator loaded an ACL file missing one of the
commands compaction runs) never leaves a lane half compacted: the script checks every
command of the call against the ACL before its first write and fails as a whole, naming
the command and the key. The lanes of that call are left as they are (counted as skipped),
the refusal is logged (``worker.compaction_refused``) and the pass goes on: the worker keeps
running, and the lanes are compacted at a later sweep once the ACL grants the command. A
read of the worker's own (a lane's tracking, its stream's length or last entries) that the
ACL refuses is logged the same way.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import structlog
from redis import exceptions as redis_exc

from signals.core._time import now_iso
from signals.core.cachekey import cache_key
from signals.core.codec import encode_signal
from signals.core.lane import is_stream_id
from signals.core.models import Attributes, Signal
from signals.core.signing import Signer
from signals.core.wire import lane_owner_id, lane_scope, parse_version
from signals.errors import CorruptDataError, InvalidInputError
from signals.streams.client import Client
from signals.streams.keys import Keys, validate_id
from signals.streams.redis_errors import acl_refused, is_whole_server
from signals.streams.scripts import ServerScript
from workers.engine.cache import RECENT, TrackingCache, rebuilt_from
from workers.engine.counters import METRICS

__all__ = ("CompactStats", "Compactor")

log = structlog.get_logger(__name__)

#: Lanes per script call (one call holds its slot while it runs).
CALL_LANES = 64


@dataclass(slots=True)
class CompactStats:
    """What compaction passes did: lanes looked at, compacted (of them, by a new snapshot
    of a delta's version), left as they were (moved meanwhile, or unreadable), and the
    signal stream entries removed."""

    scanned: int = 0
    compacted: int = 0
    snapshots: int = 0
    moved: int = 0
    skipped: int = 0
    removed: int = 0

    def add(self, other: CompactStats) -> None:
        """Accumulate another pass's counts."""
        for name in self.__slots__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass(slots=True)
class _Candidate:
    lane: str
    fields: list[str]  # v, wv, tail as stored
    delta: bool


class Compactor:
    """Compacts idle lanes of some partitions, a bounded number per pass (see the module)."""

    def __init__(self, redis: Client, keys: Keys, *, idle_ms: int, batch: int, partitions: Sequence[int],
                 signer: Signer | None = None, cache: TrackingCache | None = None) -> None:
        self.redis = redis
        self.keys = keys
        self.idle_ms = idle_ms
        self.batch = batch
        self.partitions = list(partitions)
        self.signer = signer
        self.cache = cache
        self.stats = CompactStats()
        self._script = ServerScript(redis, "compact")
        # index into partitions of the one being swept: worker instances that share the
        # partitions start their sweeps at different ones (and meet less often on a lane)
        self._turn = random.randrange(len(self.partitions)) if self.partitions else 0
        self._cursor = 0  # its SSCAN cursor
        self._swept = 0

    @property
    def partitions_swept(self) -> int:
        """How many partition sweeps the passes have completed (a whole sweep of every
        partition once this reaches ``len(partitions)``)."""
        return self._swept

    async def run_pass(self, now_ms: int) -> CompactStats:
        """Look at up to ``batch`` lanes (continuing the sweep where the last pass left it)
        and compact those idle since ``now_ms - idle_ms``."""
        stats = CompactStats()
        if self.batch <= 0 or not self.partitions:
            return stats
        budget, steps = self.batch, 0
        while budget > 0 and steps < 2 * len(self.partitions):
            steps += 1
            partition = self.partitions[self._turn % len(self.partitions)]
            cursor, members = await self.redis.sscan(self.keys.lanes(partition), self._cursor, count=min(budget, 500))
            self._cursor = int(cursor)
            if self._cursor == 0:  # this partition's sweep is done: the next pass starts the next one
                self._turn += 1
                self._swept += 1
            lanes = [m for m in members if isinstance(m, str) and self._is_lane_of(m, partition)]
            stats.skipped += len(members) - len(lanes)
            stats.scanned += len(members)
            budget -= len(members)
            for start in range(0, len(lanes), CALL_LANES):
                await self._compact(partition, lanes[start:start + CALL_LANES], now_ms - self.idle_ms, stats)
        self.stats.add(stats)
        METRICS.add("lanes_compacted", stats.compacted)
        METRICS.add("compaction_entries_removed", stats.removed)
        return stats

    def _is_lane_of(self, member: object, partition: int) -> bool:
        """Whether a lane registry member names a lane of ``partition`` (writers fill the
        registry: a member is checked before any key is built from it)."""
        if not isinstance(member, str) or lane_scope(member) is None:
            return False
        try:
            validate_id(lane_owner_id(member), "lane id")
        except InvalidInputError:
            return False
        return self.keys.partition(member) == partition

    async def _compact(self, partition: int, lanes: list[str], cutoff_ms: int, stats: CompactStats) -> None:
        candidates = await self._candidates(partition, lanes, cutoff_ms)
        if not candidates:
            return
        snapshots = await self._snapshots(partition, [c for c in candidates if c.delta])
        plan: list[dict[str, str]] = []
        keys: list[str] = []
        chosen: list[_Candidate] = []
        for c in candidates:
            payload = snapshots.get(c.lane, "") if c.delta else ""
            if c.delta and not payload:
                stats.skipped += 1
                continue
            v, wv, tail = c.fields
            mac = self.signer.mac(c.lane, payload) if self.signer and payload else ""
            kid = self.signer.key_id if self.signer else ""
            plan.append({"v": v, "wv": wv, "tail": tail, "snapshot": payload, "mac": mac, "kid": kid})
            keys += self.keys.worker_keys(c.lane)
            chosen.append(c)
        if not plan:
            return
        try:
            statuses = await self._script(keys=keys, args=[msgspec.msgpack.encode(plan)])
        except redis_exc.ResponseError as e:
            if is_whole_server(e):
                raise
            stats.skipped += len(chosen)
            if acl_refused(e):  # checked before the script's first write: nothing was written
                _log_refused(partition, len(chosen), str(e))
            else:
                log.warning("worker.compaction_failed", partition=partition, lanes=len(chosen), error=str(e))
            return
        for c, status in zip(chosen, statuses, strict=True):
            self._settle(c, status, stats)

    async def _candidates(self, partition: int, lanes: list[str], cutoff_ms: int) -> list[_Candidate]:
        """The lanes idle since ``cutoff_ms`` with more than one snapshot to them (one round trip)."""
        calls: list[str] = []
        async with self.redis.pipeline(transaction=False) as pipe:
            for lane in lanes:
                trk, sig, _ = self.keys.worker_keys(lane)
                pipe.hmget(trk, "v", "wv", "tail", "mode")
                pipe.xlen(sig)
                calls += [f"HMGET {trk}", f"XLEN {sig}"]
            replies = await pipe.execute(raise_on_error=False)
        _log_read_refusal(partition, len(lanes), calls, replies)
        candidates = (_candidate(lane, fields, length, cutoff_ms)
                      for lane, fields, length in zip(lanes, replies[0::2], replies[1::2], strict=True))
        return [c for c in candidates if c is not None]

    def _settle(self, c: _Candidate, status: list[Any], stats: CompactStats) -> None:
        """Count one lane's script status; a compacted lane's cached tracking follows."""
        if status[0] == "ok":
            stats.compacted += 1
            stats.snapshots += c.delta
            stats.removed += int(status[2])
            if self.cache is not None:
                self.cache.compacted(c.lane, int(c.fields[0]))
        elif status[0] == "moved":
            stats.moved += 1
        else:
            stats.skipped += 1
            log.warning("worker.compaction_skipped", lane=c.lane, status=[str(s)[:80] for s in status])

    async def _snapshots(self, partition: int, lanes: list[_Candidate]) -> dict[str, str]:
        """The JSON of a snapshot of each lane's last version (a delta's): its text rebuilt
        from the stream's last entries and checked against the delta's cacheKey."""
        if not lanes:
            return {}
        async with self.redis.pipeline(transaction=False) as pipe:
            for c in lanes:
                pipe.xrevrange(self.keys.signals(c.lane), count=RECENT)
            replies = await pipe.execute(raise_on_error=False)
        _log_read_refusal(partition, len(lanes), [f"XREVRANGE {self.keys.signals(c.lane)}" for c in lanes], replies)
        out: dict[str, str] = {}
        stamp = now_iso()
        for c, entries in zip(lanes, replies, strict=True):
            item = rebuilt_from(c.lane, int(c.fields[0]), c.fields[2], entries)
            if item is None:
                continue
            last = item.signal
            if cache_key(last.attributes.format, item.value) != last.cache_key:
                log.warning("worker.compaction_skipped", lane=c.lane, reason="the rebuilt text does not match "
                            "the last signal's cacheKey")
                continue
            snapshot = Signal(
                id=last.id, mode="snapshot", cache_key=last.cache_key, tag_name=last.tag_name, contents=item.value,
                value=item.value, attributes=Attributes(format=last.attributes.format, scope=last.attributes.scope),
                version=last.version, lane=last.lane, resource_id=last.resource_id, thread_id=last.thread_id,
                emitted_at=stamp, write_version=last.write_version, policy=last.policy,
            )
            out[c.lane] = encode_signal(snapshot)
        return out


def _log_refused(partition: int, lanes: int, error: str) -> None:
    log.warning("worker.compaction_refused", partition=partition, lanes=lanes, error=error[:300],
                note="the worker's Redis user may not run a command compaction needs (an ACL file that is not "
                     "the generated one?): these lanes are left as they are, and compacted at a later sweep "
                     "once the ACL grants it")


def _log_read_refusal(partition: int, lanes: int, calls: Sequence[str], replies: Sequence[object]) -> None:
    """Log the first of a pipeline's replies that is an ACL refusal, naming its command and
    key (``calls``: one per reply; Redis names neither). The lanes it read are then not
    compacted: left as they are."""
    refusal = next(((call, r) for call, r in zip(calls, replies, strict=True)
                    if isinstance(r, BaseException) and acl_refused(r)), None)
    if refusal is not None:
        _log_refused(partition, lanes, f"{refusal[0]}: {refusal[1]}")


def _candidate(lane: str, fields: Any, length: Any, cutoff_ms: int) -> _Candidate | None:
    """The lane as a compaction candidate: tracked, its last signal older than the cutoff,
    and more to it than one snapshot; ``None`` otherwise (or when it does not parse)."""
    if not isinstance(fields, list) or not isinstance(length, int) or len(fields) != 4:
        return None
    v, wv, tail, mode = fields
    if not isinstance(tail, str) or not is_stream_id(tail) or int(tail.split("-", 1)[0]) >= cutoff_ms:
        return None
    try:
        if parse_version(v, "v") < 1:
            return None
        parse_version(wv, "wv")
    except CorruptDataError:
        return None
    if mode not in ("snapshot", "delta") or (mode == "snapshot" and length <= 1):
        return None
    return _Candidate(lane, [v, wv, tail], mode == "delta")
