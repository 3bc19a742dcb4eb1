"""The worker's consumer: what it reads (:mod:`workers.engine.reader`) it decodes and checks,
and hands each batch to the lane commit protocol (:mod:`workers.engine.commit`).

One batch is, under load, one round trip whatever its size: one pipeline with one commit
script per partition that also carries the next XREADGROUP (read-ahead). Lanes in the
steady state (cached tracking, events extending the chain the worker last committed) are
planned without reading anything, and the commit script checks their documents
atomically (see :func:`workers.engine.commit.steady_document`); the other lanes, and those whose
check failed, cost one more round trip first, reading their documents (index entries,
and trackings not in the cache). A lane whose tracking moved under us (another worker
committed it first) is recomputed from the fresh tracking; an event at or below the
processed write version is acknowledged without a signal, so each write version yields
at most one signal and a crash yields no gap.

Poison events (bad JSON, wrong types, a version outside 1..2**53, a lane that does not
match its ids or does not belong to the partition: :mod:`workers.engine.events`; a version
beyond the document's) go to the partition's dead-letter stream at once, with the reason;
an event whose processing raises anything else is retried and dead-lettered after
``max_attempts`` (:mod:`workers.engine.dead_letters`).
Stale pending entries of dead consumers are reclaimed with XAUTOCLAIM.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import anyio
import anyio.abc
import msgspec
import structlog

from signals.core._time import now_iso
from signals.core.codec import FIELD, encode_json
from signals.core.lane import LaneDocument, LaneTracking
from signals.core.signing import Signer
from signals.errors import WmSignalsError
from signals.streams.client import Client
from signals.streams.keys import GROUP, Keys
from signals.streams.redis_errors import ReplyTooLargeError
from signals.streams.scripts import ServerScript
from workers.engine import chunking
from workers.engine.cache import TrackingCache
from workers.engine.chains import ChainLinks, walk_chains
from workers.engine.commit import BatchStats, LaneCommit, plan_lane, plan_steady, steady_check, steady_document
from workers.engine.commit_call import run_commits
from workers.engine.compaction import Compactor
from workers.engine.counters import METRICS
from workers.engine.dead_letters import DeadLetters
from workers.engine.events import REQUEUED_FIELD, EventDecoder, printable, text
from workers.engine.lane_state import LaneState, Pending, load_documents, read_lanes
from workers.engine.options import ConsumerOptions
from workers.engine.reader import RawEntry
from workers.engine.reconcile import Scanner
from workers.engine.recovery import Recovery
from workers.engine.settle import settle

__all__ = ("BatchStats", "Consumer")

log = structlog.get_logger(__name__)
_MAX_RECOMPUTE = 50


_Plan = tuple[LaneCommit, list[tuple[Pending, str]]] | None | Literal[False]


@dataclass(slots=True)
class _Prefetch:
    """Streams to read ahead in the next commit's round trip, and what that read returned."""

    streams: list[str]
    entries: list[RawEntry] | None = None


class Consumer(Recovery):
    """One worker's consumer over every partition of a namespace: it reads as a
    :class:`~workers.engine.reader.GroupReader` and processes what it reads."""

    def __init__(self, redis: Client, keys: Keys, options: ConsumerOptions, name: str,
                 signer: Signer | None = None) -> None:
        super().__init__(redis, keys, name, batch=options.batch, block_ms=options.block_ms, shard=options.shard)
        self.options = options
        self.signer = signer
        self.stats = BatchStats()
        self._commit = ServerScript(redis, "commit")
        self._chain = ServerScript(redis, "chain")
        self._claim = ServerScript(redis, "claim")
        self._links = ChainLinks(options.tracking_cache)
        self._cache = TrackingCache(redis, keys, options.tracking_cache)
        self._dead = DeadLetters(redis, keys, max_attempts=options.max_attempts, maxlen=options.dead_letter_maxlen)
        self._stream_partition = {s: p for p, s in enumerate(keys.all_writes())}
        self._events = EventDecoder(keys, options.tracking_cache)
        index, count = options.shard
        self.compactor = Compactor(
            redis, keys, idle_ms=max(options.compact_after_ms, options.retention.age_ms), batch=options.compact_batch,
            partitions=[p for p in range(keys.partitions) if p % count == index], signer=signer, cache=self._cache)
        #: Set when what was read ahead may be pending unread (a reply over the client's
        #: bound): the read loop then drains this consumer's pending entries.
        self.drain_needed = False
        self._scanner: Scanner | None = None

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
        started = time.perf_counter()
        stats = BatchStats(events=len(raw))
        entries: list[Pending] = []
        for stream, entry_id, fields in raw:
            partition = self._stream_partition[stream]
            if not fields:  # deleted while pending: nothing to do but acknowledge
                await self.redis.xack(stream, GROUP, entry_id)
                continue
            try:
                event, prev, requeued = self._events.decode(fields, partition)
            except (KeyError, ValueError, TypeError, WmSignalsError, msgspec.DecodeError,
                    msgspec.ValidationError) as e:
                stats.dead_letters += await self._dead.send(partition, entry_id, printable(fields),
                                                            f"poison: {text(e)}", 1)
                continue
            if requeued:  # the trace of an operator's requeue (or of a forgery marked as one)
                log.info("worker.requeued_event", lane=event.lane, entry_id=entry_id,
                         dead_letter=text(fields.get(REQUEUED_FIELD, ""))[:40])
            entries.append(Pending(partition, entry_id, event, prev, requeued))
        try:
            await self._passes(entries, stats, prefetch)
        except ReplyTooLargeError:
            # replies over the bound: a lane's keys (a document field a writer made huge, say), the
            # keys of many lanes together, or the read-ahead (its entries are pending: the read loop
            # drains them, see drain_needed); later reads take fewer entries
            self.drain_needed = True
            self.read_count = max(1, self.read_count // 4)
            if prefetch is not None:
                prefetch.entries = []
            await self._one_by_one(entries, stats)
        self.stats.add(stats)
        METRICS.record_batch(stats, time.perf_counter() - started)
        return stats

    async def _passes(self, entries: list[Pending], stats: BatchStats, prefetch: _Prefetch | None) -> None:
        """Compute and commit until no lane is left to recompute (bounded)."""
        force: dict[str, str] = {}
        for _ in range(_MAX_RECOMPUTE):
            if not entries:
                break
            entries = await self._compute_and_commit(entries, stats, force, prefetch)
        else:
            log.warning("worker.contention", lanes_left=len({e.event.lane for e in entries}))

    async def _one_by_one(self, entries: list[Pending], stats: BatchStats) -> None:
        """After a reply over the bound: each entry alone (no read-ahead), so that only the
        entries whose own lane reads are over it are dead-lettered, naming the bound (a
        lane committed before the error acknowledges its entries without a new signal)."""
        for entry in entries:
            try:
                await self._passes([entry], stats, None)
            except ReplyTooLargeError as e:
                stats.dead_letters += await self._dead.send(
                    entry.partition, entry.entry_id, {FIELD: encode_json(entry.event)},
                    f"poison: reading its lane from Redis: {text(e)}", 1)

    async def _compute_and_commit(
        self, entries: list[Pending], stats: BatchStats, force: dict[str, str], prefetch: _Prefetch | None = None
    ) -> list[Pending]:
        """One pass: plan the lanes in the steady state as they are, read the others and
        plan them, commit; returns the entries of lanes to recompute (another worker
        advanced them, a steady-state check failed, or the commit asked for a repair).

        Planning is the worker's CPU and committing is Redis's: a batch worth chunks (see
        :mod:`workers.engine.chunking`) is planned in chunks of partitions, each chunk's commit
        sent as soon as it is planned, so that Redis commits one chunk while the next is
        planned (careful-path chunks read, plan and commit as tasks of their own). A
        lighter batch is planned and committed in one go.
        """
        by_lane: dict[str, list[Pending]] = defaultdict(list)
        for entry in entries:
            by_lane[entry.event.lane].append(entry)
        now = now_iso()
        careful: list[_Careful] = []
        steady: list[_Steady] = []
        for lane, lane_entries in by_lane.items():
            lane_entries.sort(key=lambda e: e.event.version)
            found = None if lane in force else self._steady_state(lane, lane_entries)
            if found is None:
                careful.append((lane, lane_entries))
            else:
                steady.append((lane, lane_entries, *found))
        sent_back = dict(force)  # the previous pass's statuses; this pass's commits fill force anew
        force.clear()
        if not chunking.chunked([*careful, *steady]):
            return await self._plan_and_commit(careful, steady, stats, sent_back=sent_back, force=force, now=now,
                                               prefetch=prefetch)
        return await self._commit_in_chunks(careful, steady, stats, sent_back=sent_back, force=force, now=now,
                                            prefetch=prefetch)

    async def _commit_in_chunks(
        self, careful: list[_Careful], steady: list[_Steady], stats: BatchStats, *, sent_back: dict[str, str],
        force: dict[str, str], now: str, prefetch: _Prefetch | None,
    ) -> list[Pending]:
        """A batch worth chunks: careful-path chunks as tasks (read, plan, commit), then the
        steady lanes chunk by chunk, each chunk's commit sent as soon as it is planned; the
        read-ahead rides with the last chunk."""
        async def commit(per_partition: dict[int, list[LaneCommit]], ahead: _Prefetch | None) -> list[Pending]:
            return await self._commit_all(per_partition, stats, force, ahead)

        async def plan_careful(by_lane: dict[str, list[Pending]], back: dict[str, str],
                               per_partition: dict[int, list[LaneCommit]]) -> None:
            await self._plan_careful(by_lane, stats, back, now, per_partition)

        commits: chunking.ChunkCommits[_Prefetch] = chunking.ChunkCommits(commit, plan_careful, stats)
        async with anyio.create_task_group() as tg:
            try:
                careful_chunks = chunking.chunks(careful)
                for n, chunk in enumerate(careful_chunks if careful else []):
                    last = n == len(careful_chunks) - 1 and not steady
                    tg.start_soon(commits.careful, dict(chunk), sent_back, prefetch if last else None)
                if careful:
                    await chunking.let_send()
                if steady:
                    await self._plan_steady_chunks(steady, commits, tg, now, prefetch)
            except Exception as e:  # noqa: BLE001 - raised as it is once the chunks sent are done
                commits.failed(e)
        return commits.result()

    async def _plan_and_commit(
        self, careful: list[_Careful], steady: list[_Steady], stats: BatchStats, *, sent_back: dict[str, str],
        force: dict[str, str], now: str, prefetch: _Prefetch | None,
    ) -> list[Pending]:
        """A batch too small to be worth chunks: plan every lane, then one commit (no tasks:
        under light load a batch is a few events, and its latency is this path's)."""
        per_partition: dict[int, list[LaneCommit]] = defaultdict(list)
        by_lane = dict(careful)
        self._plan_steady_into(steady, now, per_partition, by_lane)
        if by_lane:
            await self._plan_careful(by_lane, stats, sent_back, now, per_partition)
        return await self._commit_all(per_partition, stats, force, prefetch)

    async def _plan_steady_chunks(
        self, steady: list[_Steady], commits: chunking.ChunkCommits[_Prefetch], tg: anyio.abc.TaskGroup, now: str,
        prefetch: _Prefetch | None,
    ) -> None:
        """Plan the steady lanes chunk by chunk, starting each chunk's commit as soon as it
        is planned; the last chunk also carries the lanes whose plan raised (planned on the
        careful path) and the read-ahead."""
        per_partition: dict[int, list[LaneCommit]] = defaultdict(list)
        failed: dict[str, list[Pending]] = {}
        chunks = chunking.chunks(steady)
        for n, chunk in enumerate(chunks):
            self._plan_steady_into(chunk, now, per_partition, failed)
            if n < len(chunks) - 1:
                tg.start_soon(commits.run, per_partition, None)
                per_partition = defaultdict(list)
                await chunking.let_send()
        if failed:  # the careful path decides, and counts the failure
            await self._plan_careful(failed, commits.stats, {}, now, per_partition)
        tg.start_soon(commits.run, per_partition, prefetch)

    def _plan_steady_into(
        self, steady: list[_Steady], now: str, per_partition: dict[int, list[LaneCommit]],
        failed: dict[str, list[Pending]],
    ) -> None:
        """Plan steady lanes into ``per_partition``; a lane whose plan raised goes to
        ``failed``, for the careful path (which decides, and counts the failure)."""
        for lane, lane_entries, tracking, doc in steady:
            commit = self._plan_steady(lane, lane_entries, tracking, doc, now)
            if commit is None:
                failed[lane] = lane_entries
            else:
                per_partition[lane_entries[0].partition].append(commit)

    def _steady_state(self, lane: str, entries: list[Pending]) -> tuple[LaneTracking, LaneDocument] | None:
        """The lane's cached tracking and the document its batch implies, when the lane is
        in the steady state (see :func:`workers.engine.commit.steady_document`); else ``None``."""
        tracking = self._cache.get(lane)
        if tracking is None or (tracking.version and tracking.value is None):
            return None
        doc = steady_document(lane, entries, tracking)
        return None if doc is None else (tracking, doc)

    def _plan_steady(
        self, lane: str, entries: list[Pending], tracking: LaneTracking, doc: LaneDocument, now: str
    ) -> LaneCommit | None:
        """Plan a lane in the steady state without reading Redis (its commit carries the
        check of its document); ``None``: its plan raised (the careful path then decides,
        and counts the failure: a forged event that makes the compute raise must not count
        against the lane's genuine ones)."""
        try:
            commit = plan_steady(lane, doc, tracking, entries, options=self.options.lane, now=now, signer=self.signer)
        except Exception:  # noqa: BLE001 - not counted here: the careful path plans it again, and counts
            return None
        commit.check = steady_check(self.keys, doc, self._links.head_for(lane, doc.eid))
        return commit

    async def _plan_careful(
        self, by_lane: dict[str, list[Pending]], stats: BatchStats, force: dict[str, str], now: str,
        per_partition: dict[int, list[LaneCommit]],
    ) -> None:
        """Read the lanes' documents and trackings, walk their chains where the documents
        are past the batch, plan them (dead letters go out here) into ``per_partition``."""
        force = {lane: status for lane, status in force.items() if lane in by_lane}
        states = await read_lanes(self.redis, self.keys, self._cache,
                                  {lane: e[0].partition for lane, e in by_lane.items()}, force)
        await walk_chains(self.redis, self.keys, self._chain, states, by_lane=by_lane, known=self._links.known,
                          heads=self._links.heads)
        planned: dict[str, _Plan] = {}
        for lane, lane_entries in by_lane.items():
            planned[lane] = await self._plan(lane, states[lane], lane_entries, stats, now,
                                             known=self._links.links(lane))
        needs_text = [lane for lane, plan in planned.items() if plan is None]
        await load_documents(self.redis, self.keys, states, needs_text)
        for lane in needs_text:
            planned[lane] = await self._plan(lane, states[lane], by_lane[lane], stats, now,
                                           known=self._links.links(lane))
        for lane, plan in planned.items():
            if not plan:  # failed (retried later), or still without its text
                continue
            commit, poison = plan
            lane_entries = by_lane[lane]
            for entry, reason in poison:
                stats.dead_letters += await self._dead.send(entry.partition, entry.entry_id,
                                                            {FIELD: encode_json(entry.event)}, reason, 1)
            if commit.entries or commit.state.repair:
                per_partition[lane_entries[0].partition].append(commit)

    async def _plan(
        self, lane: str, state: LaneState, lane_entries: list[Pending], stats: BatchStats, now: str, *,
        known: Mapping[str, str] | None,
    ) -> _Plan:
        """Plan one lane (``None``: it needs its document's text); a lane whose planning
        raises has its events retried (then dead-lettered) and is left out (``False``)."""
        try:
            return plan_lane(lane, state, lane_entries, options=self.options.lane, now=now, signer=self.signer,
                             known=known)
        except Exception as e:  # noqa: BLE001 - classified: counted, retried, then dead-lettered
            for pending in lane_entries:
                await self._dead.failed(pending, e, stats)
            return False

    async def _commit_all(
        self, per_partition: dict[int, list[LaneCommit]], stats: BatchStats, force: dict[str, str],
        prefetch: _Prefetch | None = None,
    ) -> list[Pending]:
        """Commit every partition's lanes; returns the entries of lanes to recompute.

        A partition whose script failed (a per-lane fault the checks did not foresee) is
        committed again lane by lane, so that only the faulty lane's events are retried.
        """
        retry: list[Pending] = []
        if not per_partition:
            return retry
        order = list(per_partition.items())
        for _, commits in order:  # events of versions processed already: maybe processed (and counted) elsewhere
            for c in commits:
                c.count_acks = c.stats.superseded > 0
        reading = prefetch is not None and prefetch.entries is None
        read_ahead = (self.name, prefetch.streams, self.read_count) if prefetch and reading else None
        results, ahead = await run_commits(self.redis, self.keys, self._commit, order,
                                           retention=self.options.retention, read_ahead=read_ahead)
        if prefetch is not None and reading:
            # a failed read-ahead (NOGROUP, say) is left for the next blocking read to report
            prefetch.entries = [] if isinstance(ahead, Exception) else self._flatten(ahead)
        for (partition, commits), result in zip(order, results, strict=True):
            if isinstance(result, Exception):
                retry += await self._commit_one_by_one(partition, commits, stats, force, result)
                continue
            for c, status in zip(commits, result, strict=True):
                retry += settle(c, status, stats, force, cache=self._cache, links=self._links)
        return retry

    async def _commit_one_by_one(
        self, partition: int, commits: list[LaneCommit], stats: BatchStats, force: dict[str, str], error: Exception
    ) -> list[Pending]:
        log.warning("worker.commit_failed", partition=partition, lanes=len(commits), error=str(error)[:200])
        retry: list[Pending] = []
        for c in commits:
            [result], _ = await run_commits(self.redis, self.keys, self._commit, [(partition, [c])],
                                            retention=self.options.retention)
            if isinstance(result, Exception):
                self._cache.forget(c.lane)
                for entry in c.entries:
                    await self._dead.failed(entry, result, stats)
            else:
                retry += settle(c, result[0], stats, force, cache=self._cache, links=self._links)
        return retry

_Careful = tuple[str, list[Pending]]
_Steady = tuple[str, list[Pending], LaneTracking, LaneDocument]
